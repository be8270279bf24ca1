"""The baselines registry: the plain code a user would write instead, one file each.

A **baseline** is timed beside a backend's runners over the same buffer sets
and inputs (bench's ``vs <name>`` columns, a plan's ``baseline_time_us``). It
belongs to one backend (whose buffers, streams and clock it uses) and runs on
some of that backend's rank layouts: virtual ranks in one process on one
device, one rank per GPU in one process, or one process per rank (on GPUs of
their own, or sharing one). Each is one file here with a frozen
:class:`Baseline` entry (name, description, backend, layouts, what it needs,
why it cannot run where it is refused, and a factory) and one line in
``_MODULES``, so the next baseline (NCCL on several GPUs, torch symmetric
memory, upstream Purlin) is one file plus a line. Nothing above the backends
asks this module: a Backend's ``baselines()``, ``refused_baselines()`` and
``rank_baseline()``, and each backend's Reference, ask it for them.

The order of ``_MODULES`` is the strength order: where several run on one
layout, the first is what ``--baseline auto`` and a tune's plan compare with.
Entry files import no device library; a factory imports its code when it
makes a baseline, so the registry reads on any machine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from purlin_bench.backends.port import GPUS, LAYOUTS, PROCS, PROCS_SHARED, VIRTUAL
from purlin_bench.base.errors import PurlinError
from purlin_bench.spec.instance import Instance


@dataclass(frozen=True)
class Site:
    """Where a baseline is made: its backend (by name) and rank layout, the
    runner whose buffer sets it reads and writes, and the instance. In one
    process ``reference`` is the backend's Reference of that runner (the
    expected outputs, the inputs, and ``kept``: what a baseline builds once
    over those buffers); with one process per rank ``part`` is this rank's
    Backend (its process group, its watchdog) and ``runner`` this rank's."""

    backend: str
    layout: str
    runner: Any
    inst: Instance
    reference: Any = None
    part: Any = None


def _always() -> str | None:
    return None


@dataclass(frozen=True)
class Baseline:
    """One baseline: what it is, where it runs, and how to make it."""

    name: str
    description: str
    backend: str
    # The rank layouts it runs on (port.LAYOUTS), for the one backend above.
    layouts: tuple[str, ...]
    # The timing candidate over a site's buffers (the backend's kind: a
    # CUDA stream's enqueue, a CPU call, a modelled clock).
    make: Callable[[Site], Any]
    # None where its library is here, else why not: such a baseline is not
    # offered (and asked for anyway, that is the refusal).
    available: Callable[[], str | None] = _always
    # Layouts of its backend it cannot run on that a user may expect it on,
    # with why: bench notes these when they are asked for and goes on.
    refusals: Mapping[str, str] = field(default_factory=dict)
    # Why not, when made directly on another layout of its backend.
    elsewhere: str | None = None

    def why_not(self, layout: str) -> str | None:
        """None where it runs on ``layout``, else why not (one line)."""
        if layout not in self.layouts:
            if layout in self.refusals:
                return self.refusals[layout]
            where = " or ".join(LAYOUTS[x] for x in self.layouts)
            return self.elsewhere or f"the {self.name} baseline runs on {where}, not {LAYOUTS[layout]}"
        return self.available()


# name -> module holding its BASELINE, the strongest first (see above).
_MODULES = {
    "nccl": "purlin_bench.baselines.nccl",
    "ipc": "purlin_bench.baselines.ipc",
    "torch": "purlin_bench.baselines.torch_code",
    "cupy": "purlin_bench.baselines.cupy_code",
    "numpy": "purlin_bench.baselines.reference",
    "plain": "purlin_bench.baselines.plain",
}


def names() -> tuple[str, ...]:
    return tuple(_MODULES)


def get(name: str) -> Baseline:
    if name not in _MODULES:
        raise PurlinError(f"unknown baseline '{name}' (known: {', '.join(_MODULES)})")
    return import_module(_MODULES[name]).BASELINE


def of_backend(backend: str) -> tuple[Baseline, ...]:
    """Every baseline of ``backend``, the strongest first."""
    return tuple(b for b in map(get, _MODULES) if b.backend == backend)


def offered(backend: str, layout: str) -> tuple[str, ...]:
    """The baselines ``backend`` can time on ``layout`` here, the strongest first."""
    return tuple(b.name for b in of_backend(backend) if layout in b.layouts and b.available() is None)


def refused(backend: str, layout: str) -> dict[str, str]:
    """Baselines of ``backend`` that ``layout`` cannot time, each with why."""
    return {b.name: b.refusals[layout] for b in of_backend(backend) if layout in b.refusals}


def make(name: str, site: Site) -> Any:
    """Baseline ``name`` at ``site`` as a timing candidate of its backend;
    a PurlinError says why where it cannot run there."""
    mine = of_backend(site.backend)
    entry = next((b for b in mine if b.name == name), None)
    if entry is None:
        known = ", ".join(b.name for b in mine) or "none"
        raise PurlinError(f"unknown baseline '{name}' for the {site.backend} backend (known: {known})")
    why = entry.why_not(site.layout)
    if why is not None:
        raise PurlinError(why)
    return entry.make(site)


__all__ = [
    "GPUS",
    "LAYOUTS",
    "PROCS",
    "PROCS_SHARED",
    "VIRTUAL",
    "Baseline",
    "Site",
    "get",
    "make",
    "names",
    "of_backend",
    "offered",
    "refused",
]
