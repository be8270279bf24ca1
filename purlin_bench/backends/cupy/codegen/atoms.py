"""Load the Atom CUDA sources (atoms/*.cu) and compile them with CuPy.

One module per (dtype, reduction, unroll, block-size bound, flag scope, and
whether the program reduces at all): the choices are
compile-time constants, so each variant is straight-line code. CuPy caches
compiled modules on disk; the first use of a variant on a machine compiles it
(about a second with NVRTC)."""

from __future__ import annotations

from functools import lru_cache

from purlin_bench.base.errors import ExecutionError
from purlin_bench.base.resources import data_dir

DTYPE_CODES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int32": 4}
REDOP_CODES = {"sum": 0, "prod": 1, "max": 2, "min": 3}
SOURCE = "snac.cu"


def source_text() -> str:
    return (data_dir("atoms") / SOURCE).read_text()


@lru_cache(maxsize=1)
def flags_text() -> str:
    """atoms/flags.cu: the compiled datapath's waits and releases of a step's flag list."""
    return (data_dir("atoms") / "flags.cu").read_text()


def compile_options(
    dtype: str,
    redop: str,
    unroll: int,
    max_threads: int,
    sys_scope: bool = True,
    copy_only: bool = False,
    defines: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """nvrtc options of one variant; ``defines`` (KernelSettings.defines())
    come last, so an experiment may override a switch's default."""
    return (
        "-std=c++17",
        f"-DPURLIN_DTYPE={DTYPE_CODES[dtype]}",
        f"-DPURLIN_REDOP={REDOP_CODES[redop]}",
        f"-DPURLIN_UNROLL={unroll}",
        f"-DPURLIN_MAX_THREADS={max_threads}",
        f"-DPURLIN_SYS_SCOPE={int(sys_scope)}",
        f"-DPURLIN_COPY_ONLY={int(copy_only)}",
        *defines,
    )


@lru_cache(maxsize=None)
def snac_kernel(
    dtype: str,
    redop: str,
    unroll: int,
    max_threads: int,
    device: int,
    sys_scope: bool = True,
    copy_only: bool = False,
    defines: tuple[str, ...] = (),
):
    """The compiled `snac_run` kernel for one variant, on one device. Flags
    need system scope only when some peer is another GPU; ``copy_only``
    leaves the reduce code out (programs whose every op is a copy)."""
    import cupy

    with cupy.cuda.Device(device):
        try:
            module = cupy.RawModule(
                code=source_text(),
                options=compile_options(dtype, redop, unroll, max_threads, sys_scope, copy_only, defines),
            )
            return module.get_function("snac_run")
        except cupy.cuda.compiler.CompileException as exc:
            first = next((line for line in str(exc).splitlines() if "error" in line), str(exc).splitlines()[0])
            raise ExecutionError(f"atoms/{SOURCE} failed to compile for {dtype}/{redop}: {first.strip()}") from None
