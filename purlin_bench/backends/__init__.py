"""The backend registry: name -> Backend class, imported when first asked for.

A new backend is a new folder here plus one line below. Each folder's
``__init__`` exposes ``BACKEND``; it imports without its own dependency
(CuPy loads when a GPU program runs), so sweeps and plans validate on any
machine, and a missing dependency is one line from ``available()``.
"""

from __future__ import annotations

from importlib import import_module

from purlin_bench.backends.port import Backend
from purlin_bench.base.config import Param
from purlin_bench.base.errors import PurlinError

# name -> module; ``auto`` takes the first available in AUTO_ORDER.
_BACKENDS = {
    "numpy": "purlin_bench.backends.numpy",
    "cupy": "purlin_bench.backends.cupy",
    "fake": "purlin_bench.backends.fake",
}
AUTO_ORDER = ("cupy", "numpy")
# The CPU reference every machine has: what ``auto`` falls back to, and
# ``purlin check``'s default.
REFERENCE = "numpy"
AUTO = "auto"


def names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def backend_class(name: str) -> type[Backend]:
    if name not in _BACKENDS:
        raise PurlinError(f"unknown backend '{name}' (known: {AUTO}, {', '.join(_BACKENDS)})")
    try:
        module = import_module(_BACKENDS[name])
    except ImportError as exc:
        raise PurlinError(f"backend {name} cannot be imported: {exc}") from None
    return module.BACKEND


def resolve(name: str) -> tuple[type[Backend], str | None]:
    """The backend class for ``name``; ``auto`` picks the first usable one of
    AUTO_ORDER and returns, when that is not the first, a one-line note
    saying why. A named backend that cannot run here is an error."""
    if name == AUTO:
        first_why = None
        for candidate in AUTO_ORDER:
            cls = backend_class(candidate)
            why = cls.available()
            if why is None:
                # auto means "a GPU where one is usable": say why there is none.
                note = None if candidate == AUTO_ORDER[0] else f"no GPU ({first_why}): using the {cls.description}"
                return cls, note
            first_why = first_why or why
        raise PurlinError(f"no backend can run here ({first_why})")
    cls = backend_class(name)
    why = cls.available()
    if why is not None:
        raise PurlinError(f"backend {name} cannot run here: {why}")
    return cls, None


def open_backend(name: str, ranks: int, gpus: tuple[int, ...] | None = None, seed: int = 0) -> Backend:
    """A backend for ``ranks`` ranks (or one per GPU of ``gpus``)."""
    cls, _ = resolve(name)
    return make(cls, ranks, gpus, seed)


def make(cls: type[Backend], ranks: int, gpus: tuple[int, ...] | None = None, seed: int = 0) -> Backend:
    """A backend for ``ranks`` ranks; in a process of a run with one process
    per rank (backends.procs.join), rank 0's backend over every process."""
    from purlin_bench.backends import procs

    run = procs.current()
    if run is not None:
        if gpus:
            raise PurlinError(
                "--gpus with one process per rank maps ranks to GPUs when the run starts (--procs N --gpus ...),"
                " not inside a process"
            )
        if ranks != run.size:
            raise PurlinError(f"{ranks} ranks asked for, but this run has {run.size} processes (one rank each)")
        return procs.drive(cls, run, seed)
    if gpus and not cls.has_devices:
        raise PurlinError(f"--gpus needs a backend that runs on GPUs; {cls.name} simulates its ranks")
    if (len(gpus) if gpus else ranks) < 1:
        raise PurlinError(f"ranks must be >= 1, got {ranks}")
    return cls(ranks, gpus, seed)


def detect(name: str, ranks: int, gpus: tuple[int, ...] | None = None):
    """The fingerprint of this machine for backend ``name`` and a layout."""
    return make(backend_class(name), ranks, gpus).fingerprint()


def all_params() -> dict[str, tuple[Param, tuple[str, ...]]]:
    """Every datapath parameter some backend takes: the first declaration of
    each name, and the backends that take it (sweeps and the CLI read these,
    so a parameter is checked the same way everywhere)."""
    out: dict[str, tuple[Param, tuple[str, ...]]] = {}
    for name in _BACKENDS:
        for p in backend_class(name).params:
            first, owners = out.get(p.name, (p, ()))
            out[p.name] = (first, (*owners, name))
    return out


__all__ = [
    "AUTO",
    "AUTO_ORDER",
    "Backend",
    "REFERENCE",
    "all_params",
    "backend_class",
    "detect",
    "make",
    "names",
    "open_backend",
    "resolve",
]
