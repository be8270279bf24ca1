"""Datapath executors, one plug-in per file, behind a small registry.

``numpy`` runs everywhere (the reference, used by every CI test); ``cupy`` needs
a CUDA GPU and CuPy and is imported only when asked for.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from purlin_bench.errors import ExecutionError

# name -> (module, class); modules import lazily so numpy-only machines never import CuPy.
_EXECUTORS = {
    "numpy": ("purlin_bench.executors.numpy_exec", "NumpyExecutor"),
    "cupy": ("purlin_bench.executors.cupy_exec", "CupyExecutor"),
}


def executor_names() -> list[str]:
    return list(_EXECUTORS)


def get_executor_class(name: str) -> type:
    """The executor class of backend ``name`` (its ``PARAMS`` say which
    datapath parameters it accepts), without instantiating it."""
    if name not in _EXECUTORS:
        raise ExecutionError(f"unknown backend '{name}' (known: {', '.join(_EXECUTORS)})")
    module, cls = _EXECUTORS[name]
    return getattr(import_module(module), cls)


def get_executor(name: str, **options: Any):
    return get_executor_class(name)(**options)


def gpu_available() -> tuple[bool, str]:
    """Whether the cupy backend can run here, and if not, why (one line)."""
    try:
        import cupy
    except ImportError:
        return False, "CuPy is not installed (pip install 'purlin-bench[cuda13]')"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CuPy raises its own CUDARuntimeError types
        return False, f"no usable CUDA GPU ({type(exc).__name__}: {exc})"
    if n < 1:
        return False, "no CUDA GPU found"
    return True, f"{n} CUDA GPU(s)"
