"""How a :class:`~purlin_bench.torch.Communicator` joins its torch group,
picks the GPU backend, maps a tensor to a collective's count, and chooses the
configuration a collective runs with (a tuned plan, else the default).

Nothing here imports torch: the caller hands in ``torch.distributed``.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

from purlin_bench.backends import AUTO_ORDER, backend_class
from purlin_bench.backends.port import Backend
from purlin_bench.base.config import RunConfig
from purlin_bench.procs import Group, StoreServer
from purlin_bench.procs.env import store_over_torch
from purlin_bench.base.errors import PurlinError
from purlin_bench.measure.service import MeasurementService
from purlin_bench.plans import ArtifactError, load_plan_file, plan_path
from purlin_bench.plans.load import TunedCollective, default_results_dir
from purlin_bench.spec.instance import MAX_RANKS, Instance, instantiate
from purlin_bench.spec.loader import CollectiveSpec


def join_group(tdist: Any, pg: Any, rank: int, size: int, timeout_s: float) -> tuple[Group, StoreServer | None]:
    """Our own group over torch's ``pg``, for exchanging IPC handles: rank 0
    of ``pg`` serves a token-guarded store on loopback (the ranks share one
    host, as CUDA IPC needs) and tells the others where, over ``pg``."""
    store, server, token = store_over_torch(tdist, pg, rank, timeout_s, "the communicator's store")
    # The run's name, the same on every rank: from the token, one way, so
    # no key name says anything of the token itself.
    group = Group(store, rank, size, f"torch-{hashlib.sha256(token).hexdigest()[:16]}", timeout_s=timeout_s)
    if server is not None:
        # The group closes it, after waiting (bounded) for the others to leave.
        group.own(server)
    return group, server


def gpu_backend() -> type[Backend]:
    """The first backend of AUTO_ORDER that runs on GPUs, one process per
    rank, and can run here."""
    why = []
    for name in AUTO_ORDER:
        cls = backend_class(name)
        if not (cls.has_devices and cls.runs_in_procs):
            continue
        reason = cls.available()
        if reason is None:
            return cls
        why.append(f"{cls.name}: {reason}")
    raise PurlinError(f"no GPU backend can run here ({'; '.join(why) or 'none runs one process per rank'})")


def count_for(
    spec: CollectiveSpec, size: int, rank: int, root: int, itemsize: int, n_in: int, n_out: int | None
) -> Instance:
    """The instance of ``spec`` whose rank-``rank`` input holds ``n_in``
    elements (and output ``n_out``, when given). A rank that sends nothing
    (non-roots of broadcast and scatter) takes the count from ``n_out``, else
    reads ``n_in`` as the root's input size. PurlinError where none fits."""
    if not 1 <= size <= MAX_RANKS or not spec.supports_ranks(size):
        raise PurlinError(f"{spec.name} does not run on {size} ranks")
    if spec.rooted and not 0 <= root < size:
        raise PurlinError(f"root {root} is not in 0..{size - 1}")
    one = instantiate(spec, size, 1, itemsize, root)
    if one.in_counts[rank]:
        count, per, have = n_in // one.in_counts[rank], one.in_counts[rank], n_in
    elif n_out is not None and one.out_counts[rank]:
        count, per, have = n_out // one.out_counts[rank], one.out_counts[rank], n_out
    else:
        count, per, have = (n_in // one.in_counts[root] if one.in_counts[root] else 0), one.in_counts[root], n_in
    inst = instantiate(spec, size, count, itemsize, root) if count >= 1 else None
    fits = inst is not None and count * per == have
    if fits and one.in_counts[rank]:
        fits = inst.in_counts[rank] == n_in
    if fits and n_out is not None:
        fits = inst.out_counts[rank] == n_out
    if not fits:
        outs = "" if n_out is None else f" and an output of {n_out}"
        raise PurlinError(
            f"{spec.name} on {size} ranks (rank {rank}, root {root}): an input of {n_in} elements{outs} fits no "
            f"count (a positive multiple of {per} is needed)"
        )
    return inst


class Configs:
    """The configuration per instance: this GPU type's tuned plan for the
    collective, dtype and ``Nproc-Mgpu`` layout, where one is found, else the
    backend's default. Asked on rank 0 only (its answer is shared), so every
    rank runs the same program even if their working folders differ."""

    def __init__(self, backend: Backend, size: int, plan_dir: Any = None):
        self.backend = backend
        self.service = MeasurementService(backend)
        self.folder = plan_dir if plan_dir is not None else default_results_dir(backend.name)
        self.here = backend.fingerprint()  # its layout is the processes' (procs_layout_slug)
        self.layout = self.here.layout
        self.size = size
        self._tuned: dict[tuple[str, str], TunedCollective | None] = {}

    def config(self, inst: Instance, dtype: str) -> RunConfig:
        # A variable collective's plans are by total bytes, which its device
        # counts keep from the host: the default, whatever plans there are.
        if inst.variable:
            return self.service.default_config(inst)
        tuned = self.tuned(inst.spec, dtype)
        if tuned is None:
            return self.service.default_config(inst)
        return tuned.config_for(inst.spec.bytes_for_count(inst.ranks, inst.count, inst.itemsize))

    def tuned(self, spec: CollectiveSpec, dtype: str) -> TunedCollective | None:
        key = (spec.name, dtype)
        if key not in self._tuned:
            self._tuned[key] = self._find(spec, dtype)
        return self._tuned[key]

    def _find(self, spec: CollectiveSpec, dtype: str) -> TunedCollective | None:
        path = plan_path(self.folder, self.here.gpu_type, spec.name, self.layout, dtype)
        where = f"{spec.name} {dtype} on {self.here.gpu_type}, {self.layout}"
        hint = f"purlin tune {spec.name} --dtype {dtype} --procs {self.size}"
        if not path.exists():
            _note(
                f"purlin_bench.torch: no tuned plan for {where} ({path} does not exist): using the default "
                f"configuration (tune one: {hint})"
            )
            return None
        try:
            plan = load_plan_file(path, spec)
        except ArtifactError as exc:
            _note(f"purlin_bench.torch: {exc}: using the default configuration")
            return None
        differences = plan.fingerprint.differences(self.here)
        if differences or plan.ranks != self.size:
            why = "; ".join(differences) or f"{plan.ranks} ranks vs {self.size}"
            _note(
                f"purlin_bench.torch: {path} was tuned elsewhere ({why}): using the default configuration (tune one: "
                f"{hint})"
            )
            return None
        return TunedCollective(plan, spec, self.backend.name, str(path))


def _note(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=4)


__all__ = ["Configs", "count_for", "gpu_backend", "join_group"]
