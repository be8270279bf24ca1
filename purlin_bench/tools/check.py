"""The combinations ``purlin check`` runs, and running one of them.

Kept apart from the command so that the matrix (what runs, what is n/a and
why, what is an error) can be read and tested without a console.

Cost: instantiating a spec is cheap but planning is not (the validator walks
every program), so :func:`expand` instantiates each (spec, ranks, root, count,
element size) once, and :func:`run` plans through derive_program.s cache and
keeps one measurement service per rank count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

from purlin_bench.backends import make
from purlin_bench.backends.port import Backend
from purlin_bench.measure.compare import partial_overflow
from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import DTYPES, REDOPS, resolve_dtype
from purlin_bench.procs.errors import DistError
from purlin_bench.base.errors import CapacityError, PurlinError, SpecError
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.measure.service import MeasurementService
from purlin_bench.spec.instance import Instance, instantiate
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.spec.variable import DISTRIBUTIONS, distribution_option
from purlin_bench.strategies import STRATEGIES
from purlin_bench.base.sizes import counted

PASS, FAIL, NA, ERROR = "pass", "FAIL", "n/a", "error"


@dataclass(frozen=True)
class Request:
    """What the user asked for, parsed; None in a field means 'the default'."""

    specs: tuple[CollectiveSpec, ...]
    ranks: tuple[int, ...]
    strategies: tuple[str, ...] | None  # None: every strategy
    dtypes: tuple[str, ...]
    counts: tuple[int, ...]
    roots: tuple[int, ...] | None  # None: every root of a rooted collective
    redops: tuple[str, ...] | None  # None: each spec's own reduction
    inplace: tuple[bool, ...]
    # How the calls of a collective whose sizes come per call draw their
    # counts: a distribution of spec/variable.py, or "all" (one call each).
    distribution: str = "all"


@dataclass(frozen=True)
class Combo:
    collective: str
    ranks: int
    root: int | None  # None for a collective without a root
    count: int
    dtype: str
    redop: str | None  # None for a copy
    strategy: str
    inplace: bool
    counts: str | None = None  # variable sizes: how its calls drew their counts


@dataclass(frozen=True)
class Outcome:
    combo: Combo
    status: str  # PASS, FAIL, NA or ERROR
    steps: int | None = None
    wrong: int | None = None
    total: int | None = None
    note: str = ""
    seconds: float | None = None  # to plan, run and compare (a rank count's first row also opens its backend)


    @property
    def failed(self) -> bool:
        return self.status in (FAIL, ERROR)

    def to_dict(self) -> dict:
        c = self.combo
        return {
            "collective": c.collective,
            "ranks": c.ranks,
            "root": c.root,
            "count": c.count,
            "dtype": c.dtype,
            "redop": c.redop,
            "strategy": c.strategy,
            "inplace": c.inplace,
            "counts": c.counts,
            "status": self.status,
            "steps": self.steps,
            "wrong": self.wrong,
            "elements": self.total,
            "note": self.note,
            "seconds": None if self.seconds is None else round(self.seconds, 4),
        }


@dataclass(frozen=True)
class Job:
    """A combination to run, with the instance it runs on."""

    combo: Combo
    inst: Instance = field(compare=False)


# -- parsing the matrix options --------------------------------------------


def parse_names(text: str, what: str, known: Sequence[str],
                canonical: Callable[[str], str] = str) -> tuple[str, ...] | None:
    """'all' -> None; 'a,b' -> ('a', 'b') checked against ``known``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise PurlinError(f"{what} is empty")
    if parts == ["all"]:
        return None
    names = tuple(dict.fromkeys(canonical(p) for p in parts))
    for name in names:
        if name not in known:
            raise PurlinError(f"unknown {what.lstrip('-')} '{name}' (known: all, {', '.join(known)})")
    return names


def parse_strategies(text: str) -> tuple[str, ...] | None:
    return parse_names(text, "--strategy", list(STRATEGIES))


def parse_dtypes(text: str) -> tuple[str, ...]:
    return parse_names(text, "--dtype", list(DTYPES), lambda n: resolve_dtype(n)[0]) or tuple(DTYPES)


def parse_counts(text: str | None, specs: Sequence[CollectiveSpec]) -> str:
    """--counts: one distribution of a call's counts, or 'all' (the default)."""
    return distribution_option(text, specs, ("all", *DISTRIBUTIONS), "all")


def parse_redops(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return parse_names(text, "--op", REDOPS) or REDOPS


# -- expanding it ------------------------------------------------------------


def expand(request: Request) -> Iterator[Job | Outcome]:
    """Every combination asked for, in table order: a Job to run, or an n/a
    Outcome saying why it cannot run (rank counts a spec's 'requires' refuses,
    roots out of range, in place where the collective has no in-place form).

    A spec is validated at load for R = 1..8 only; at another R it can still
    be broken (an index dividing by R - 9). That R (or root) becomes one error
    row with the reason, and the other rows still run."""
    for spec in request.specs:
        for ranks in request.ranks:
            try:
                supported = spec.supports_ranks(ranks)
            except SpecError as exc:
                yield _refused(spec, ranks, None, exc)
                continue
            if not supported:  # ranks >= 1 here, so its 'requires' said no
                combo = Combo(spec.name, ranks, None, 0, "-", None, "-", False)
                yield Outcome(combo, NA,
                              note=f"{spec.name} does not support {counted(ranks, 'rank')} (requires "
                                   f"{spec.requires.text})")
                continue
            roots: Sequence[int | None] = [None]
            if spec.rooted:
                roots = range(ranks) if request.roots is None else request.roots
            for root in roots:
                if root is not None and root >= ranks:
                    combo = Combo(spec.name, ranks, root, 0, "-", None, "-", False)
                    yield Outcome(combo, NA, note=f"root {root} is not a rank of {ranks}")
                    continue
                yield from _expand_instance(request, spec, ranks, root)


def _expand_instance(request: Request, spec: CollectiveSpec, ranks: int, root: int | None) -> Iterator[Job | Outcome]:
    redops: Sequence[str | None] = [None]
    if spec.op == "reduce":
        redops = request.redops or [spec.redop]
    try:
        # Whether the spec holds at this R and root does not depend on the
        # count or element size, so one instantiation tells.
        instantiate(spec, ranks, 1, 4, root or 0)
    except SpecError as exc:
        yield _refused(spec, ranks, root, exc)
        return
    for count in request.counts:
        instances: dict[int, Instance] = {}  # by element size: float16 and bfloat16 share one
        for dtype in request.dtypes:
            itemsize = DTYPES[dtype].itemsize
            for redop in redops:
                base = Combo(spec.name, ranks, root, count, dtype, redop, "-", False,
                             request.distribution if spec.variable else None)
                if itemsize not in instances:
                    instances[itemsize] = instantiate(spec, ranks, count, itemsize, root or 0)
                inst = instances[itemsize]
                yield from _expand_strategies(request, inst, base)


def _refused(spec: CollectiveSpec, ranks: int, root: int | None, exc: SpecError) -> Outcome:
    return Outcome(Combo(spec.name, ranks, root, 0, "-", None, "-", False), ERROR,
                   note=f"spec refused at {counted(ranks, 'rank')}: {exc}")


def _expand_strategies(request: Request, inst: Instance, base: Combo) -> Iterator[Job | Outcome]:
    inplace_why = inst.inplace_refusal() if any(request.inplace) else None
    for strategy in request.strategies or tuple(STRATEGIES):
        for inplace in request.inplace:
            combo = replace(base, strategy=strategy, inplace=inplace)
            if inplace and inplace_why:
                yield Outcome(combo, NA, note=inplace_why)
            else:
                yield Job(combo, inst)


# -- running it --------------------------------------------------------------


class JobRunner:
    """Runs jobs on one backend, one measurement service per rank count."""

    def __init__(self, backend: type[Backend], seed: int, gpus: tuple[int, ...] | None = None,
                 exec_params: dict | None = None):
        self.backend = backend
        self.seed = seed
        self.exec_params = dict(exec_params or {})  # the datapath asked for (--kernel), else the runner's own
        self.gpus = gpus  # one rank per GPU; rank counts then equal len(gpus)
        self.services: dict[int, MeasurementService] = {}

    def service(self, ranks: int) -> MeasurementService:
        if ranks not in self.services:
            self.services[ranks] = MeasurementService(make(self.backend, ranks, self.gpus, self.seed))
        return self.services[ranks]

    def run(self, job: Job) -> Outcome:
        start = time.perf_counter()
        outcome = self._run(job)
        return replace(outcome, seconds=time.perf_counter() - start)

    def _run(self, job: Job) -> Outcome:
        c = job.combo
        service = self.service(c.ranks)
        config = RunConfig.make(c.strategy, {}, self.exec_params)
        try:
            program = service.program(job.inst, config, c.dtype, c.redop, c.inplace)
        except PurlinError as exc:  # a strategy emitted a program the validator rejects: a bug to report
            return Outcome(c, ERROR, note=f"plan: {exc}")
        try:
            result = service.check(job.inst, config, c.dtype, c.redop, c.inplace, seed=self.seed,
                                   counts=c.counts or "all")
        except DistError:
            raise  # a lost rank ends the run: every later check would say the same
        except CapacityError as exc:  # --kernel compiled over a program past its build bound: the interpreter's to run
            return Outcome(c, NA, steps=program.step_count(), note=str(exc))
        except PurlinError as exc:  # deadlock, device timeout
            return Outcome(c, ERROR, steps=program.step_count(), note=f"run: {exc}")
        if not result.ok:
            # The service checked on exact_inputs with this seed; the same
            # draw tells whether a partial kept in the dtype overflowed.
            inputs = exact_inputs(program.in_counts, resolve_dtype(c.dtype)[1], program.redop, self.seed)
            overflowed = partial_overflow(job.inst, program.redop, resolve_dtype(c.dtype)[1], inputs)
            result = replace(result, overflowed=overflowed)
        status = PASS if result.ok else FAIL
        return Outcome(c, status, program.step_count(), result.wrong, result.total, result.note(c.dtype))
