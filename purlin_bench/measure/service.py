"""The one measurement service: how check, bench, every tune trial and the
tune guard turn (collective, size, configuration) into checked outputs and
times, on any backend, through the backend port only.

* **Exact inputs, checked where the outputs are.** Inputs are small integers
  whose results are exact in every dtype (purlin_bench.base.inputs); the backend's
  Reference compares outputs bit for bit (on the device for a GPU).
* **The same buffer sets.** A prepared configuration rotates over enough
  buffer sets that one call's data is not still in L2 from the last, with
  the inputs loaded into every set, whoever asks: a tune trial and a bench
  row of the same configuration and size run the same calls.
* **Side by side.** ``compare`` times every candidate asked for (the
  configuration, the default, the baselines) in turns, batch by batch, in
  one process (Backend.time), so their ratios hold on a drifting machine.
* **Variable sizes** (``count: variable``): a check draws each call's counts
  from a distribution (spec/variable.py) and loads them with the inputs, so
  one prepared program runs calls of different sizes; what a backend cannot
  run (variable sizes, an element type) is refused before it is prepared.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from purlin_bench.backends.port import Backend, Reference, Runner, TimingPolicy, check_params, unsupported
from purlin_bench.measure.compare import CheckResult
from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import CapacityError, PurlinError
from purlin_bench.strategies.default import untuned_config
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance, instantiate
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.spec.variable import DISTRIBUTIONS, draw_counts
from purlin_bench.base.timing import Timing

# Rotate inputs over enough buffer sets that one call's data is not still in
# L2 from the last (the H200 has 60 MB of L2); big messages need no rotation.
ROTATE_BYTES = 256 << 20
MAX_SETS = 8
# Prepared configurations kept: the tune's finals time up to four
# configurations at each of up to three probe sizes, round after round; a
# bench row a configuration, the default and an in-place form. (At 6 the
# finals prepared every configuration again each round, and tunes of the
# H200 plans ran past their time limits.)
_KEPT = 12
# A configuration whose buffer sets hold this much gets the cache to itself:
# the world's buffers and the reference's outputs are the device's memory.
_ALONE_BYTES = 256 << 20


def _counts_arg(counts) -> dict:
    """Runner.load's counts only where a call has them: a backend whose
    runners take none (a GPU's, for fixed sizes) is called as before."""
    return {} if counts is None else {"counts": counts}


def rotation_sets(program: Program) -> int:
    """Buffer sets a program's calls rotate over when timed."""
    return sets_for(_set_bytes(program))


def sets_for(per_set: int) -> int:
    """Buffer sets of ``per_set`` bytes each that a rotation takes."""
    return int(min(MAX_SETS, max(1, -(-ROTATE_BYTES // max(1, per_set)))))


def _set_bytes(program: Program) -> int:
    return (sum(program.in_counts) + sum(program.out_counts)) * resolve_dtype(program.dtype)[1].itemsize


@dataclass(frozen=True)
class Prepared:
    """A configuration ready to time: its runner with exact inputs in every
    buffer set, the reference it was checked against, and that check."""

    inst: Instance
    config: RunConfig
    program: Program
    runner: Runner
    reference: Reference
    nwrong: int


@dataclass(frozen=True)
class Comparison:
    """Times of candidates taken side by side, by label; ``nwrong`` of the
    configurations; baselines that could not run here, with why."""

    times: Mapping[str, Timing]
    nwrong: Mapping[str, int]
    unavailable: Mapping[str, str] = field(default_factory=dict)

    def us(self, label: str) -> float:
        return self.times[label].median_us


class MeasurementService:
    """Check and time on one backend (one rank layout)."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self._prepared: OrderedDict[tuple, Prepared] = OrderedDict()
        # Seconds the prepared runners spent building device code (shown by
        # bench: a compiled datapath's first run on a machine pays for it).
        self.build_s = 0.0

    @property
    def ranks(self) -> int:
        return self.backend.ranks

    def instance(self, spec: CollectiveSpec, count: int, dtype: str, root: int = 0) -> Instance:
        _, np_dtype = resolve_dtype(dtype)
        return instantiate(spec, self.ranks, count, np_dtype.itemsize, root)

    def default_config(
        self, inst: Instance, plan_overrides: Mapping[str, Any] | None = None, strategy: str | None = None
    ) -> RunConfig:
        """The untuned default (``--strategy auto``): the heuristics'
        strategy (or ``strategy``) with this backend's datapath defaults.
        ``plan_overrides`` (a user's --channels or --slice-bytes) are applied
        first, so the backend chooses its datapath for the program that will run."""
        # Not rank_layout(): a process driver has no world to ask whether its ranks share a GPU.
        processes = self.backend.procs is not None
        base = untuned_config(inst, processes) if strategy is None else RunConfig.make(strategy, {})
        if plan_overrides:
            base = RunConfig.make(base.strategy, {**dict(base.plan_params), **plan_overrides}, dict(base.exec_params))
        return self.backend.default_config(inst, base)

    def program(
        self, inst: Instance, config: RunConfig, dtype: str, redop: str | None = None, inplace: bool = False
    ) -> Program:
        return derive_program(inst, config.strategy, dtype, redop, dict(config.plan_params), inplace)

    def warm_up(self, dtype: str, redop: str | None = None) -> int:
        with self.backend.guard():
            return self.backend.warm_up(dtype, redop)

    def _runnable(self, program: Program) -> None:
        """Refuse, before preparing, what the backend does not run: a check
        reports it as not applicable (CapacityError), other commands say why."""
        why = unsupported(type(self.backend), program)
        if why:
            raise CapacityError(why)

    def check(
        self,
        inst: Instance,
        config: RunConfig,
        dtype: str,
        redop: str | None = None,
        inplace: bool = False,
        seed: int = 0,
        calls: int = 2,
        counts: str = "all",
    ) -> CheckResult:
        """``calls`` calls on one buffer set (so epoch flags advance), each
        compared with the reference; the worst count of wrong elements.
        With variable sizes each call draws new counts from ``counts`` (a
        distribution of spec/variable.py; "all": each in turn, at least one
        call each), so one prepared program runs calls of different sizes."""
        program = self.program(inst, config, dtype, redop, inplace)
        self._runnable(program)
        rng = np.random.default_rng(seed)
        dists = DISTRIBUTIONS if counts == "all" else (counts,)
        if program.variable:
            calls = max(calls, len(dists))
        drawn = iter(range(calls))

        def call_counts():
            return draw_counts(inst, dists[next(drawn) % len(dists)], rng) if program.variable else None

        with self.backend.guard():
            runner = self.backend.prepare(program, 1, **dict(config.exec_params))
            try:
                inputs = exact_inputs(program.in_counts, resolve_dtype(dtype)[1], program.redop, seed)
                runner.load(inputs, 0, **_counts_arg(call_counts()))
                reference = self.backend.reference(runner, inst, inputs)
                wrong = 0
                for call in range(calls):
                    if call:
                        # In place, the last call overwrote the inputs; variable: new sizes.
                        runner.load(inputs, 0, **_counts_arg(call_counts()))
                    runner.run(0)
                    wrong = max(wrong, reference.count_wrong(runner, 0))
            finally:
                runner.close()
        return CheckResult(wrong, sum(program.out_counts))

    def prepare(
        self,
        inst: Instance,
        config: RunConfig,
        dtype: str,
        redop: str | None = None,
        inplace: bool = False,
        counts: tuple[int, ...] | None = None,
    ) -> Prepared:
        """``config`` prepared over its rotation of buffer sets, exact inputs
        in each, checked once; kept for the next ask (a tune trial is checked,
        then timed; the finals time the same configurations again).

        On a GPU, runners of one size share the world's buffers, so what a
        runner is timed on is what the last preparation of that size loaded:
        the same exact inputs (one seed), unless an in-place call has since
        written over them. Times do not depend on the values; ``nwrong`` was
        counted right after this runner's own load.

        A variable program's calls all run with ``counts`` (a bench row's),
        loaded into every buffer set."""
        program = self.program(inst, config, dtype, redop, inplace)
        self._runnable(program)
        if program.variable and counts is None:
            raise PurlinError(f"{inst.spec.name}: timing a variable-length collective needs the counts of its calls")
        # Keyed by the parameters as the backend runs them: {} and the same
        # values written out are one configuration, one runner.
        params = tuple(sorted(check_params(type(self.backend), dict(config.exec_params)).items()))
        key = (program, params, counts if program.variable else None)
        if key in self._prepared:
            self._prepared.move_to_end(key)
            return self._prepared[key]
        self._make_room(program, inst)
        with self.backend.guard():
            sets = rotation_sets(program)
            runner = self.backend.prepare(program, sets, **dict(config.exec_params))
            try:
                inputs = exact_inputs(program.in_counts, resolve_dtype(dtype)[1], program.redop)
                called = _counts_arg(counts if program.variable else None)
                for slot in range(sets):
                    runner.load(inputs, slot, **called)
                reference = self.backend.reference(runner, inst, inputs)
                runner.run(0)
                nwrong = reference.count_wrong(runner, 0)
                if program.inplace_offsets is not None:
                    runner.load(inputs, 0, **called)
            except BaseException:
                runner.close()  # a trial that fails (a watchdog, a deadlock) leaves nothing held
                raise
        self._prepared[key] = prepared = Prepared(inst, config, program, runner, reference, nwrong)
        self.build_s += getattr(runner, "build_s", 0.0)
        return prepared

    def _make_room(self, program: Program, inst: Instance) -> None:
        """Let go of every prepared configuration of another size when this
        one is big, and of the oldest beyond _KEPT. A comparison prepares its
        candidates (at most four, the finals') one after the other before it
        times them, so the ones it just prepared are never the oldest."""
        if _set_bytes(program) * rotation_sets(program) >= _ALONE_BYTES:
            for key in [k for k, p in self._prepared.items() if p.inst != inst]:
                self._prepared.pop(key).runner.close()
        while len(self._prepared) >= _KEPT:
            _, old = self._prepared.popitem(last=False)
            old.runner.close()

    def compare(
        self,
        inst: Instance,
        configs: Mapping[str, RunConfig],
        dtype: str,
        redop: str | None = None,
        baselines: Sequence[str] = (),
        policy: TimingPolicy = TimingPolicy(),
        inplace: bool = False,
        counts: tuple[int, ...] | None = None,
    ) -> Comparison:
        """Time ``configs`` (label -> configuration) and ``baselines`` side by
        side at one size. A configuration that cannot be planned or run
        raises (PurlinError); a baseline that cannot run here is left out and
        reported in ``unavailable``."""
        if not configs:
            raise PurlinError("nothing to compare")
        prepared = {
            label: self.prepare(inst, config, dtype, redop, inplace, counts) for label, config in configs.items()
        }
        candidates: dict[str, Any] = {label: p.runner.candidate() for label, p in prepared.items()}
        unavailable: dict[str, str] = {}
        first = next(iter(prepared.values()))
        with self.backend.guard():
            for name in baselines:
                try:
                    candidates[name] = first.reference.baseline(name)
                except PurlinError as exc:
                    unavailable[name] = str(exc)
            times = self.backend.time(list(candidates.values()), policy)
        return Comparison(dict(zip(candidates, times)), {label: p.nwrong for label, p in prepared.items()}, unavailable)
