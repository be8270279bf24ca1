"""From a spec instance, a strategy and its parameters to a validated Program.

This is the orchestration layer's front door: every program anyone runs
(check, bench, tune, load_plan) comes from :func:`derive_program`, and every program it
returns has passed :func:`~purlin_bench.program.validate.validate` against the
spec's dataflow.
"""

from __future__ import annotations

from typing import Any

from purlin_bench.base.errors import ProgramError
from purlin_bench.program.model import Program
from purlin_bench.program.validate import ProgramInvalid, validate
from purlin_bench.spec.instance import Instance
from purlin_bench.strategies import STRATEGIES, get_strategy
from purlin_bench.strategies.base import (ALIGN_BYTES, Builder, add_call_protocol, check_params, finish,
                                          redirect_outputs_through_scratch)


def derive_program(
    inst: Instance,
    strategy: str,
    dtype: str,
    redop: str | None = None,
    params: dict[str, Any] | None = None,
    inplace: bool = False,
) -> Program:
    """Build and validate the program of ``strategy`` for ``inst``.

    In place, a strategy whose program would overwrite an input a peer still
    reads is rerouted through scratch (see ``redirect_outputs_through_scratch``)."""
    chosen = get_strategy(strategy)
    checked = check_params(strategy, dict(params or {}), chosen.params)
    redop = redop or inst.spec.redop
    key = (inst.spec, inst.ranks, inst.root, inst.count, inst.itemsize, strategy, dtype, redop,
           tuple(sorted(checked.items())), inplace)
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _derive_uncached(inst, strategy, checked, dtype, redop, inplace)
    return _CACHE[key]


# Programs are immutable and validation is the costly part: keep recent ones.
_CACHE: dict[tuple, Program] = {}
_CACHE_SIZE = 256
# Most steps a program may have. A tuner sampling small slices of a large
# message asks for programs of 100k+ steps that take seconds to validate and
# lower and run no faster; refused, the trial is recorded as invalid at once.
MAX_STEPS = 1 << 16


def _derive_uncached(inst: Instance, strategy: str, params: dict[str, int], dtype: str, redop: str | None,
                   inplace: bool) -> Program:
    program = _build(inst, strategy, params, dtype, redop, inplace, reroute=False)
    if not inplace:
        return validate(program, inst)
    try:
        return validate(program, inst)
    except ProgramInvalid:
        rerouted = _build(inst, strategy, params, dtype, redop, inplace, reroute=True)
        return validate(rerouted, inst)


def _least_steps(inst: Instance, slice_bytes: int) -> int:
    """A lower bound on any strategy's steps, known before building: every
    slice of every flow is at least one step. Checked first, since building
    the steps of 10M elements in 1-byte slices takes minutes and memory."""
    if not slice_bytes:
        return 0  # slices picked per strategy: bounded by its pieces, not by the count
    unit = max(1, ALIGN_BYTES // inst.itemsize)
    size = max(unit, -(-max(1, slice_bytes // inst.itemsize) // unit) * unit)
    return sum(-(-flow.count // size) for flow in inst.flows)


def _too_many(strategy: str, inst: Instance, steps: int) -> ProgramError:
    return ProgramError(f"{strategy} would take {steps} steps for {inst.spec.name} of {inst.count} elements "
                     f"(at most {MAX_STEPS}); use larger slices or fewer channels")


def _build(inst: Instance, strategy: str, params: dict[str, int], dtype: str, redop: str | None, inplace: bool,
           reroute: bool) -> Program:
    least = _least_steps(inst, params["slice_bytes"])
    if least > MAX_STEPS:
        raise _too_many(strategy, inst, least)
    b = Builder(inst, params["channels"])
    STRATEGIES[strategy].emit(b, params)
    steps = sum(len(steps) for chans in b.lists for steps in chans)
    if steps > MAX_STEPS:
        raise _too_many(strategy, inst, steps)
    if reroute:
        redirect_outputs_through_scratch(b)
    # Parity scratch for fixed sizes only: sizes per call keep the windows (not yet proven there).
    add_call_protocol(b, STRATEGIES[strategy].parity and not inst.variable)
    return finish(b, strategy, params, dtype, redop, inplace)


__all__ = ["ProgramError", "derive_program"]
