"""One kernel launch of a runner: the ranks it runs, its step table, epochs,
status words and the arguments it is launched with.

A subclass per kernel kind (the datapath's ``kernel`` parameter, KINDS) says
how its kernel is built, what it is launched with, and what it asks of the
buffers; the runner picks one and never asks which it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from purlin_bench.backends.cupy.codegen.atoms import compile_options, snac_kernel, source_text
from purlin_bench.backends.cupy.codegen.compiled import BASE_ALIGN, BaseLayout, compiled_kernel, generate, params_of
from purlin_bench.backends.cupy.codegen.lower import Lowered, flag_id, lower
from purlin_bench.backends.cupy.runtime.status import pool as status_pool

if TYPE_CHECKING:
    from purlin_bench.backends.cupy.runtime.runner import CupyRunner


def _np_storage(dtype: np.dtype) -> np.dtype:
    """CuPy has no bfloat16: device arrays of it are held as uint16 bits."""
    return np.dtype(np.uint16) if dtype.name == "bfloat16" else dtype


class Launch:
    """One kernel launch: the ranks it runs, its table, epochs and status."""

    # The datapath's ``kernel`` parameter that picks this kind (KINDS), as errors name it.
    label: ClassVar[str] = ""
    # Where every buffer must start for this kind's kernel (bytes).
    base_align: ClassVar[int] = 1
    # Whether it reads slice sizes from per-call counts (a variable program).
    variable_sizes: ClassVar[bool] = True

    def __init__(self, runner: "CupyRunner", ranks: list[int], lowered: Lowered):
        import cupy

        self.device = runner.world.devices[ranks[0]]
        self.ranks = ranks
        self.lowered = lowered
        with cupy.cuda.Device(self.device):
            self.ops = cupy.asarray(lowered.ops.view(np.uint8))
            self.groups = cupy.asarray(lowered.groups)
            self.grid = lowered.group_count * runner.blocks
            self.epochs = cupy.zeros(max(1, self.grid), dtype=cupy.uint64)
            self.kernel, self.params = self.build(runner)
            self.stream = cupy.cuda.Stream(non_blocking=True)
            # Taken after all that can fail (the kernel's build): a launch
            # that fails to be made holds no slot.
            self.slot = status_pool().slot()
            self.status = self.slot.device
            # A launch whose blocks wait on flags relies on all of them being
            # resident at once (a group's notify counts every block, and a
            # rank's groups wait on each other): a cooperative launch is
            # what guarantees that of its own grid, or fails at once.
            self.cooperative = bool(len(lowered.ops)) and bool((lowered.ops["nwait"] > 0).any())
            self.sizes = None if lowered.sizes is None else cupy.asarray(lowered.sizes)
        self.arg_cache: dict[int, tuple] = {}
        self.packed: dict[int, tuple[int, object]] = {}  # buffer set -> enqueue's packed parameters

    def build(self, runner: "CupyRunner") -> tuple[object, tuple[str, ...]]:
        """This launch's kernel and the names of the bases it takes as parameters."""
        raise NotImplementedError

    @classmethod
    def registers(cls, runner: "CupyRunner", device: int) -> int:
        """Registers a thread of this kind's kernel, asked before any launch exists (occupancy)."""
        raise NotImplementedError

    def bind(self, runner: "CupyRunner") -> None:
        """Once the runner's base tables and flags exist: what the kernel takes from them."""

    def arguments(self, runner: "CupyRunner", slot: int) -> tuple:
        """This launch's arguments for buffer set ``slot``, made once: a
        serving stack calls every step, and building them cost host time."""
        made = self.arg_cache.get(slot)
        if made is None:
            made = self.arg_cache[slot] = self._arguments(runner, slot)
        return made

    def _arguments(self, runner: "CupyRunner", slot: int) -> tuple:
        raise NotImplementedError

    def enqueue(self, runner: "CupyRunner", stream: int, slot: int) -> None:
        """Launch on the stream whose handle is ``stream`` with the kernel
        parameters packed once per buffer set: one driver call, where CuPy's
        kernel call converts every argument again on each call (host time a
        serving stack pays per layer). The caller makes this launch's device
        current."""
        from cupy.cuda import driver

        packed = self.packed.get(slot)
        if packed is None:
            packed = self.packed[slot] = _pack(self.arguments(runner, slot))
        launch = driver.launchCooperativeKernel if self.cooperative else driver.launchKernel
        extra = () if self.cooperative else (0,)
        # RawKernel.kernel is per device (the current one): this launch's device is current here.
        launch(self.kernel.kernel.ptr, self.grid, 1, 1, runner.threads, 1, 1, 0, stream, packed[0], *extra)


def _pack(args: tuple) -> tuple[int, object]:
    """cuLaunchKernel's kernelParams for ``args`` (device arrays and NumPy
    scalars, as CuPy takes them): the array's address, and what it points
    into, which must live as long as the address is used."""
    import ctypes

    values = []
    for arg in args:
        if isinstance(arg, np.generic):  # at its dtype's width, as CuPy's CScalar stores it
            values.append(np.ctypeslib.as_ctypes_type(arg.dtype)(arg.item()))
        elif hasattr(arg, "data") and hasattr(arg.data, "ptr"):
            # A device array: its address. CuPy passes a CArray whose first
            # field is that address, and the kernels take plain T* (8 bytes).
            values.append(ctypes.c_void_p(arg.data.ptr))
        else:
            raise TypeError(f"a kernel argument must be a NumPy scalar or a device array, got {type(arg).__name__}")
    params = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
    return ctypes.addressof(params), (params, values)


class InterpretedLaunch(Launch):
    """The step interpreter (atoms/snac.cu): one build per dtype, op and
    shape; the step table, base table and counts are its arguments."""

    label = "interpreted"

    def build(self, runner: "CupyRunner") -> tuple[object, tuple[str, ...]]:
        return self.kernel_of(runner, self.device), ()

    @staticmethod
    def kernel_of(runner: "CupyRunner", device: int):
        # A variable program's build sizes slices from counts in device memory (D44).
        variable = ("-DPURLIN_VARIABLE=1",) if runner.program.variable else ()
        return snac_kernel(
            runner.program.dtype,
            runner.program.redop or "sum",
            runner.unroll,
            runner.threads,
            device,
            runner.world.sys_scope,
            runner.copy_only,
            runner.settings.defines(runner.copy_only, runner.threads) + variable,
        )

    @classmethod
    def registers(cls, runner: "CupyRunner", device: int) -> int:
        return cls.kernel_of(runner, device).attributes["num_regs"]

    def _arguments(self, runner: "CupyRunner", slot: int) -> tuple:
        if self.sizes is None:  # fixed sizes: the counts and size table are null pointers
            counts = (np.uint64(0), np.uint64(0))
        else:
            counts = (np.uint64(runner.counts_of(self.ranks[0], slot)), self.sizes)
        return (
            self.ops,
            self.groups,
            runner.bases[slot][self.device],
            self.epochs,
            self.status,
            runner.abort,
            np.uint64(runner.timeout_ns),
            np.int32(runner.blocks),
            np.int32(3 * runner.program.ranks),
            *counts,
        )


class CompiledLaunch(Launch):
    """CUDA C++ generated for this launch's steps (codegen/compiled.py),
    built by NVRTC once per machine; slice and flag bases are parameters."""

    label = "compiled"
    base_align = BASE_ALIGN  # the generated vector splits assume it (BaseLayout)
    # Slice sizes and addresses from the call's counts, in registers (codegen/variable.py, D46).
    variable_sizes = True

    def build(self, runner: "CupyRunner") -> tuple[object, tuple[str, ...]]:
        # Lowered again with flag ids: they become parameter offsets.
        low = lower(runner.program, self.ranks, runner.world.fused, runner.datapath, flag_id)
        source = generate(
            low,
            runner.program.ranks,
            runner.blocks,
            source_text(),
            BaseLayout.of(runner.program, runner.itemsize),
            jitter=bool(runner.settings.jitter_ns),
            scratch_shift=runner.program.scratch_shift(1) * runner.itemsize,
        )
        options = compile_options(
            runner.program.dtype,
            runner.program.redop or "sum",
            runner.unroll,
            runner.threads,
            runner.world.sys_scope,
            runner.copy_only,
            runner.settings.defines(runner.copy_only, runner.threads),
        )
        kernel, seconds = compiled_kernel(source, options, self.device)
        runner.build_s += seconds
        return kernel, params_of(source)

    @classmethod
    def registers(cls, runner: "CupyRunner", device: int) -> int:
        # Before the kernel exists (its block count is a constant in it):
        # the most its launch bounds allow (128 registers a thread at 512
        # threads an SM).
        return 65536 // (runner.threads * max(1, 512 // runner.threads))

    def bind(self, runner: "CupyRunner") -> None:
        # One tuple of bases (b<i>: a slice base, f<r>: rank r's flags) per buffer set.
        flags = [np.uint64(f.data.ptr) for f in runner.flags]
        self.args = [
            tuple(np.uint64(b["host"][int(n[1:])]) if n[0] == "b" else flags[int(n[1:])] for n in self.params)
            for b in runner.bases
        ]

    def _arguments(self, runner: "CupyRunner", slot: int) -> tuple:
        counts = (np.uint64(runner.counts_of(self.ranks[0], slot)),) if self.sizes is not None else ()
        return (*self.args[slot], self.epochs, self.status, runner.abort, np.uint64(runner.timeout_ns), *counts)


# The datapath's ``kernel`` parameter -> the launch of that kind.
KINDS: dict[str, type[Launch]] = {kind.label: kind for kind in (InterpretedLaunch, CompiledLaunch)}
