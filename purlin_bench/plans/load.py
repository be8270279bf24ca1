"""Python API for tuned plans: ``purlin_bench.load_plan``.

    import purlin_bench
    allreduce = purlin_bench.load_plan("all-reduce", dtype="float32", ranks=8)
    outputs = allreduce(inputs)                # one array per rank
    allreduce.config_for(1 << 20)              # the configuration used at 1 MiB

``load_plan`` takes a plan file, or a collective name: then it looks in
``results/<gpu-type>/<collective>-<layout>-<dtype>[-<counts>].json`` for the GPU type and
rank layout of this machine (the CPU reference: "cpu", in ``results-cpu/``). A plan tuned on another GPU type
or layout is refused with what differs; ``override=True`` runs it anyway.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from purlin_bench.backends import AUTO, backend_class, detect, make, resolve as resolve_backend
from purlin_bench.backends.port import run_once
from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import PurlinError
from purlin_bench.base.hardware import Fingerprint, is_procs_layout
from purlin_bench.measure.service import MeasurementService
from purlin_bench.plans import ArtifactError, PlanArtifact, PlanEntry, load_plan_file, plan_path
from purlin_bench.spec.instance import Instance, instantiate
from purlin_bench.spec.loader import CollectiveSpec, resolve
from purlin_bench.spec.variable import DISTRIBUTIONS
from purlin_bench.tools.tune.effective import for_backend
from purlin_bench.base.sizes import counted

DEFAULT_RESULTS = "results"
# Plans of CPU (or modelled) timings say nothing of a GPU and differ on every
# machine: they go beside the tracked results/, in a folder git ignores.
CPU_RESULTS = "results-cpu"
_RUNNERS_KEPT = 8  # prepared programs per tuned collective (one per message size in use)


class TunedCollective:
    """A collective with a tuned configuration per message-size bucket.

    Calling it runs the collective on a list of per-rank input arrays on the
    plan's backend (or the one asked for) and returns the per-rank outputs."""

    def __init__(self, plan: PlanArtifact, spec: CollectiveSpec, backend: str, source: str):
        if not plan.entries:
            raise ArtifactError(f"{source}: the plan has no entries")
        self.plan = plan
        self.spec = spec
        self.backend = backend
        self.source = source
        _, self._np_dtype = resolve_dtype(plan.dtype)
        self._service: MeasurementService | None = None
        self._runners: OrderedDict[tuple, tuple[Any, Any]] = OrderedDict()

    def __repr__(self) -> str:
        buckets = counted(len(self.plan.entries), "bucket")
        return (f"TunedCollective({self.plan.collective}, {self.plan.dtype}, {self.plan.fingerprint.describe()}, "
                f"{buckets}, backend={self.backend})")

    @property
    def ranks(self) -> int:
        return self.plan.ranks

    def entry_for(self, nbytes: int) -> PlanEntry:
        """The bucket entry for a message of ``nbytes`` (nccl-tests size S):
        the last entry starting at or below it; below the first, the first."""
        chosen = self.plan.entries[0]
        for entry in self.plan.entries:
            if entry.min_bytes <= nbytes:
                chosen = entry
        return chosen

    def config_for(self, nbytes: int) -> RunConfig:
        """The configuration this plan runs a message of ``nbytes`` with."""
        return for_backend(self.entry_for(nbytes).config, self.backend)

    def count_of(self, inputs: Sequence[Any], root: int = 0) -> int:
        """The collective's count for these per-rank input lengths."""
        lengths = tuple(int(len(x)) for x in inputs)
        per_one = instantiate(self.spec, self.ranks, 1, self._np_dtype.itemsize, root).in_counts
        count = next((n // k for n, k in zip(lengths, per_one) if k), 0)
        if instantiate(self.spec, self.ranks, count, self._np_dtype.itemsize, root).in_counts != lengths:
            raise PurlinError(f"inputs of lengths {list(lengths)} do not fit {self.spec.name} on "
                              f"{counted(self.ranks, 'rank')} (root {root}): no count gives these lengths")
        return count

    def __call__(self, inputs: Sequence[Any], root: int = 0, redop: str | None = None) -> list[Any]:
        if self.spec.variable:
            raise PurlinError(f"{self.spec.name} takes its sizes per call: run it through purlin_bench.torch's "
                              f"Communicator or `purlin bench --plan`; this callable runs fixed sizes")
        if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__len__"):
            raise PurlinError(f"inputs must be a list of per-rank arrays, got {type(inputs).__name__}")
        if len(inputs) != self.ranks:
            raise PurlinError(f"this plan is for {self.ranks} ranks; got {len(inputs)} input arrays")
        for r, x in enumerate(inputs):
            # A plain list has no dtype: said as the caller's mistake, not an AttributeError.
            if not hasattr(x, "dtype") or getattr(x, "ndim", 1) != 1:
                raise PurlinError(f"input of rank {r} must be a 1-D array of {self.plan.dtype}, got {type(x).__name__}")
            if np.dtype(x.dtype) != self._np_dtype:
                raise PurlinError(f"input of rank {r} is {x.dtype}; this plan is for {self.plan.dtype}")
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < self.ranks:
            raise PurlinError(f"root must be a rank of 0..{self.ranks - 1}, got {root!r}")
        count = self.count_of(inputs, root)
        _, runner = self._runner(count, root, redop)
        service = self.service()
        with service.backend.guard():
            return run_once(runner, list(inputs))

    def _runner(self, count: int, root: int, redop: str | None) -> tuple[Instance, Any]:
        key = (count, root, redop)
        if key in self._runners:
            self._runners.move_to_end(key)
            return self._runners[key]
        service = self.service()
        inst = service.instance(self.spec, count, self.plan.dtype, root)
        config = self.config_for(self.spec.bytes_for_count(self.ranks, count, self._np_dtype.itemsize))
        program = service.program(inst, config, self.plan.dtype, redop)
        with service.backend.guard():
            runner = service.backend.prepare(program, 1, **dict(config.exec_params))
        self._runners[key] = (inst, runner)
        if len(self._runners) > _RUNNERS_KEPT:
            _, (_, old) = self._runners.popitem(last=False)
            old.close()
        return self._runners[key]

    def service(self) -> MeasurementService:
        if self._service is None:
            cls = backend_class(self.backend)
            gpus = _plan_gpus(self.plan, self.backend)
            resolve_backend(self.backend)  # one line where it cannot run here (override=True on another machine)
            self._service = MeasurementService(make(cls, self.ranks, gpus))
        return self._service


def load_plan(
    target: str | Path,
    dtype: str = "float32",
    ranks: int | None = None,
    *,
    gpus: Sequence[int] | None = None,
    backend: str | None = None,
    results_dir: str | Path | None = None,
    override: bool = False,
    spec: CollectiveSpec | None = None,
    counts: str | None = None,
) -> TunedCollective:
    """A tuned collective from a plan file, or from a collective name with
    this machine's GPU type and rank layout (``ranks`` virtual ranks, default
    8, or one per GPU of ``gpus``).

    ``backend`` runs it elsewhere than the plan's own backend (e.g. a GPU plan
    on the numpy reference, with ``override=True``). ``spec`` supplies the
    collective when the plan is of a user's spec file, not a built-in one.
    ``counts`` picks a variable collective's plan by the distribution it was
    tuned with (default uniform); such a plan's buckets are by total bytes, and
    ``purlin bench --plan`` uses it (its callable runs fixed sizes only)."""
    _check_arguments(target, dtype, ranks, gpus, backend, spec)
    if counts is not None and counts not in DISTRIBUTIONS:
        raise PurlinError(f"load_plan: unknown counts '{counts}' (known: {', '.join(DISTRIBUTIONS)})")
    if _is_path(target):
        path = Path(target)
        plan = load_plan_file(path, spec)
        run_backend = backend or plan.backend
        machine_backend = backend or _natural_backend()
        plan_gpus = gpus if gpus is not None else _plan_gpus(plan, machine_backend)
        here = _machine(machine_backend, ranks or plan.ranks, plan_gpus)
    else:
        collective = str(target)
        canonical_dtype, _ = resolve_dtype(dtype)
        run_backend = backend or _natural_backend()
        here = _machine(run_backend, ranks or 8, gpus)
        folder = results_dir if results_dir is not None else default_results_dir(run_backend)
        variable = (spec or resolve(collective)).variable
        path = plan_path(folder, here.gpu_type, collective, here.layout, canonical_dtype,
                         (counts or "uniform") if variable else None)
        if not path.exists():
            hint = tune_hint(collective, canonical_dtype, run_backend, ranks or 8, gpus, results_dir)
            hint += f" --counts {counts}" if variable and counts and counts != "uniform" else ""
            raise ArtifactError(f"no tuned plan for {collective} {canonical_dtype} on {here.describe()}: {path} does "
                                f"not exist (run: {hint})")
        plan = load_plan_file(path, spec)
    _check_fits(plan, here, str(path), override)
    # The counts asked (by name: uniform unless said) must be the plan's own,
    # whatever its file is called; a file given without counts is taken as it is.
    asked = counts if counts is not None or _is_path(target) else "uniform"
    if plan.counts is not None and asked is not None and plan.counts != asked:
        raise ArtifactError(f"{path}: is a plan for counts {plan.counts}, not {asked}")
    return TunedCollective(plan, spec or _spec_of(plan, str(path)), run_backend, str(path))


def _check_arguments(target, dtype, ranks, gpus, backend, spec) -> None:
    """load_plan's arguments, each of its type and domain: a wrong one is one
    PurlinError line, not a TypeError deep inside (and ``ranks=0`` is an
    error, not the default 8 it was quietly taken for)."""
    from purlin_bench.spec.instance import MAX_RANKS

    if not isinstance(target, (str, Path)):
        raise PurlinError(f"load_plan: target must be a plan file or a collective name, got {type(target).__name__}")
    if not isinstance(dtype, str):
        raise PurlinError(f"load_plan: dtype must be a name such as 'float32', got {type(dtype).__name__}")
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= MAX_RANKS):
        raise PurlinError(f"load_plan: ranks must be a whole number from 1 to {MAX_RANKS}, got {ranks!r}")
    if gpus is not None and (isinstance(gpus, (str, bytes)) or not all(
            isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus)):
        raise PurlinError(f"load_plan: gpus must be a list of device numbers, got {gpus!r}")
    if backend is not None and not isinstance(backend, str):
        raise PurlinError(f"load_plan: backend must be a name, got {type(backend).__name__}")
    if spec is not None and not isinstance(spec, CollectiveSpec):
        raise PurlinError(f"load_plan: spec must be a CollectiveSpec (purlin_bench.spec.load_spec_file(PATH)), "
                          f"got {type(spec).__name__} {spec!r}"[:200])


def default_results_dir(backend: str) -> str:
    """Where ``purlin tune`` writes, and ``load_plan`` looks for, plans timed
    on ``backend`` unless a folder is given."""
    return DEFAULT_RESULTS if backend_class(backend).times_gpu() else CPU_RESULTS


def tune_hint(collective: str, dtype: str, backend: str, ranks: int, gpus: Sequence[int] | None,
              results_dir: str | Path | None) -> str:
    """The ``purlin tune`` command that writes the plan looked for, chosen to
    finish in minutes where it is suggested: a GPU gets the quick sweep (the
    default one takes hours), the CPU reference its own short defaults."""
    words = ["purlin", "tune", collective, "--dtype", dtype]
    if backend_class(backend).times_gpu():
        words += ["--sweep", "quick"]
    if backend != _natural_backend():
        words += ["--backend", backend]
    if gpus:
        words += ["--gpus", ",".join(str(g) for g in gpus)]
    elif ranks != 8:  # the built-in sweeps' rank count
        words += ["--ranks", str(ranks)]
    if results_dir is not None and str(results_dir) != default_results_dir(backend):
        words += ["--out", str(results_dir)]
    return " ".join(words)


class PlanLookup:
    """For ``purlin bench --plan FILE|auto``: (instance, message bytes) -> the
    plan's configuration, as the backend runs it; ``sources`` names the plan
    file of each collective (results say which plan produced them)."""

    def __init__(self, load: Callable[[str], TunedCollective]):
        self._load = load
        self.tuned: dict[str, TunedCollective] = {}

    def load(self, name: str) -> TunedCollective:
        if name not in self.tuned:
            self.tuned[name] = self._load(name)
        return self.tuned[name]

    @property
    def sources(self) -> dict[str, str]:
        return {name: t.source for name, t in self.tuned.items()}

    def __call__(self, inst: Instance, nbytes: int) -> RunConfig:
        return self.load(inst.spec.name).config_for(nbytes)


def plan_lookup(plan: str, backend: str, ranks: int, dtype: str, gpus: Sequence[int] | None = None,
                results_dir: str | Path | None = None, collectives: Sequence[str] = (),
                counts: str = "uniform") -> PlanLookup:
    """The :class:`PlanLookup` of ``plan``. ``auto`` finds each collective's
    plan for this machine; a file must match the collective. The plans of
    ``collectives`` are read now, not at the first size measured: a missing
    or corrupt one is refused before the bench prints or measures anything."""
    canonical_dtype, _ = resolve_dtype(dtype)
    from_file = None if plan == "auto" else load_plan(plan, canonical_dtype, ranks, gpus=gpus, backend=backend)

    def load(name: str) -> TunedCollective:
        if from_file is None:
            return load_plan(name, canonical_dtype, ranks, gpus=gpus, backend=backend, results_dir=results_dir,
                             counts=counts)
        _check_matches(from_file, name, canonical_dtype, counts)
        return from_file

    lookup = PlanLookup(load)
    for name in collectives:
        lookup.load(name)
    return lookup


def _check_matches(tuned: TunedCollective, collective: str, dtype: str, counts: str = "uniform") -> None:
    if tuned.plan.collective != collective:
        raise ArtifactError(f"{tuned.source}: is a plan for {tuned.plan.collective}, not {collective}")
    if tuned.plan.dtype != dtype:
        raise ArtifactError(f"{tuned.source}: is a plan for {tuned.plan.dtype}, not {dtype}")
    if tuned.plan.counts is not None and tuned.plan.counts != counts:
        raise ArtifactError(f"{tuned.source}: is a plan for counts {tuned.plan.counts}, not {counts} (--counts)")


def _check_fits(plan: PlanArtifact, here: Fingerprint, source: str, override: bool) -> None:
    differences = plan.fingerprint.differences(here)
    if differences and not override:
        raise ArtifactError(f"{source}: tuned on {plan.fingerprint.describe()}, this machine is {here.describe()}: "
                            f"{'; '.join(differences)} differ (pass override=True to use it anyway)")


def _is_path(target: str | Path) -> bool:
    text = str(target)
    return isinstance(target, Path) or text.endswith(".json") or "/" in text or Path(text).is_file()


def _natural_backend() -> str:
    """The backend ``auto`` picks here (a GPU where one is usable)."""
    return resolve_backend(AUTO)[0].name


def _plan_gpus(plan: PlanArtifact, backend: str) -> tuple[int, ...] | None:
    """The GPUs a plan file's layout opens in this process on ``backend``:
    one rank per GPU where the plan had several and the backend runs on GPUs;
    none for ranks in processes, whose launcher maps each rank to its GPU
    (the plan's devices are every rank's, (0, 0) for 2 processes on one GPU),
    and none on a backend that simulates its ranks (a GPU plan on the numpy
    reference, override=True)."""
    if is_procs_layout(plan.fingerprint.layout) or not backend_class(backend).has_devices:
        return None
    devices = plan.fingerprint.devices
    return devices if len(devices) > 1 else None


def _machine(backend: str, ranks: int, gpus: Sequence[int] | None) -> Fingerprint:
    return detect(backend, ranks, tuple(gpus) if gpus else None)


def _spec_of(plan: PlanArtifact, source: str) -> CollectiveSpec:
    try:
        return resolve(plan.collective)
    except PurlinError as exc:
        raise ArtifactError(f"{source}: {exc} (pass spec= for a plan of your own collective)") from None


__all__ = ["TunedCollective", "default_results_dir", "load_plan", "plan_lookup", "tune_hint"]
