"""Bounds and option values checked before any work: each is one PurlinError
line that says the bound and why, instead of minutes of silence while memory
grows, or a value quietly taken to mean something else."""

from __future__ import annotations

import os
from typing import Iterable

from purlin_bench.base.errors import PurlinError
from purlin_bench.base.sizes import counted
from purlin_bench.measure.service import sets_for
from purlin_bench.spec.instance import MAX_RANKS, MAX_RANKS_WHY, Instance
from purlin_bench.strategies.base import COMMON_PARAMS


def check_ranks(counts: Iterable[int], option: str = "--ranks") -> None:
    for n in counts:
        if n > MAX_RANKS:
            raise PurlinError(f"{option} {n}: at most {MAX_RANKS} ranks ({MAX_RANKS_WHY})")


def check_plan_param(name: str, value: int | None, option: str) -> None:
    """A strategy parameter given on the command line, in its domain (the
    same Param derive_program checks, so the CLI and plans agree)."""
    if value is None:
        return
    param = next(p for p in COMMON_PARAMS if p.name == name)
    try:
        param.check(value)
    except PurlinError as exc:
        raise PurlinError(f"{option}: {exc}") from None


def check_choice(value: int, option: str, allowed: tuple[int, ...]) -> None:
    if value not in allowed:
        raise PurlinError(f"{option} takes {' or '.join(map(str, allowed))}, got {value}")


def check_given(text: str | None, option: str) -> None:
    """An option given with an empty value is an error, not its default."""
    if text is not None and not text.strip(" ,"):
        raise PurlinError(f"{option} is empty (leave the option out for its default)")


def op_given() -> bool:
    """Whether --op was on the command line (not its default): asked of click,
    so bench keeps its nccl-tests default of sum."""
    try:  # typer >= 0.22 carries its own copy of click (as in main.py)
        from typer._click import core
        from typer._click.globals import get_current_context
    except ImportError:
        from click import core
        from click.globals import get_current_context

    ctx = get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source("op") not in (None, core.ParameterSource.DEFAULT)


def check_no_op(specs, given: bool) -> None:
    """--op names a reduction; a copy collective has none to replace."""
    if not given:
        return
    copies = [s.name for s in specs if s.op != "reduce"]
    if copies and len(copies) == len(list(specs)):
        raise PurlinError(f"--op: {', '.join(copies)} "
                          f"{'is a copy collective' if len(copies) == 1 else 'are copy collectives'} with no reduction")


def needed_bytes(inst: Instance, itemsize: int, copies: int = 1) -> int:
    """Host bytes one configuration of ``inst`` takes on a CPU backend, about:
    its rotation of buffer sets (measurement.sets_for)
    for each of ``copies`` prepared forms, the exact inputs, and the
    reference's float64 accumulation and result."""
    ins, outs = sum(inst.in_counts), sum(inst.out_counts)
    per_set = (ins + outs) * itemsize
    return copies * sets_for(per_set) * per_set + ins * itemsize + outs * (8 + itemsize)


def available_memory() -> int | None:
    """Bytes the system can give without swapping (MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def check_memory(needed: int, what: str, backend) -> None:
    """Refuse a run on a CPU backend (its buffers are host memory) that
    would need more memory than there is: numpy would fail after minutes, or
    the machine would swap."""
    if backend.times_gpu():
        return  # device memory: the backend's guard reports it as one line
    have = available_memory()
    if have is not None and needed > have:
        raise PurlinError(f"{what} needs about {_gib(needed)} of memory on the {backend.name} backend, and "
                          f"{_gib(have)} is available")


def check_bench(specs, maxbytes: str | None, backend: str, ranks: int, gpus: str | None, datatype: str,
                inplace: bool, distribution: str = "uniform") -> None:
    """purlin bench's bounds, before the backend starts: the rank count,
    --op on copy collectives, and the memory the largest size needs."""
    from purlin_bench.backends import resolve as resolve_backend
    from purlin_bench.base.dtypes import resolve_dtype
    from purlin_bench.base.sizes import parse_bytes
    from purlin_bench.spec.instance import instantiate

    if gpus is None:
        check_ranks([ranks])
    check_no_op(specs, op_given())
    backend_cls, _ = resolve_backend(backend)
    if backend_cls.times_gpu() or ranks < 1:
        return
    dtype, np_dtype = resolve_dtype(datatype)
    top = parse_bytes(maxbytes or backend_cls.default_bench_max, "--maxbytes")
    for spec in specs:
        if not spec.supports_ranks(ranks):
            continue
        if spec.variable:  # the row's own instance: its buffers hold the largest of its counts
            from purlin_bench.tools.bench.run import instances

            inst = instances(spec, [top], ranks, dtype, 0, distribution)[0].inst
        else:
            inst = instantiate(spec, ranks, spec.count_for_bytes(ranks, top, np_dtype.itemsize), np_dtype.itemsize)
        # The configuration, the default it is compared with, in place too.
        check_memory(needed_bytes(inst, np_dtype.itemsize, copies=4 if inplace else 2),
                     f"{spec.name} at {top} B on {counted(ranks, 'rank')}", backend_cls)


def check_tune(jobs, sweep, backend) -> None:
    """purlin tune's memory bound, as bench has it: each job at the largest
    size its buckets probe (a trial, the default and the finalists' sets)."""
    from purlin_bench.base.dtypes import DTYPES
    from purlin_bench.tools.bench.run import instances

    top = max(max(b.probe_bytes) for b in sweep.buckets)
    for job in jobs:
        itemsize = DTYPES[job.dtype].itemsize
        # The row a trial times there (a variable collective's buffers hold its largest count).
        inst = instances(job.spec, [top], job.ranks, job.dtype, 0, job.counts or "uniform")[0].inst
        check_memory(needed_bytes(inst, itemsize, copies=2),
                     f"{job.spec.name} at {top} B on {counted(job.ranks, 'rank')}"
                     + (f" ({job.counts} counts: buffers at the largest)" if job.counts else ""), backend)


def check_check(request, backend) -> None:
    """purlin check's bounds: rank counts, --op on copy collectives, and the
    memory of the largest count of each collective."""
    from purlin_bench.base.dtypes import DTYPES
    from purlin_bench.base.errors import SpecError
    from purlin_bench.spec.instance import instantiate

    check_ranks(request.ranks)
    check_no_op(request.specs, request.redops is not None)
    itemsize = max(DTYPES[d].itemsize for d in request.dtypes)
    for spec in request.specs:
        for ranks in request.ranks:
            try:
                if not spec.supports_ranks(ranks):
                    continue
                inst = instantiate(spec, ranks, max(request.counts), itemsize)
            except SpecError:
                continue  # a spec broken at this rank count: the check reports it as that row, and runs the others
            check_memory(needed_bytes(inst, itemsize),
                         f"{spec.name} of count {max(request.counts)} on {counted(ranks, 'rank')}", backend)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


__all__ = ["available_memory", "check_choice", "check_given", "check_bench", "check_check", "check_tune",
           "check_memory", "check_no_op", "op_given", "check_plan_param", "check_ranks", "needed_bytes"]
