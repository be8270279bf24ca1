"""The GPU backend: the Atom kernel (atoms/snac.cu) through CuPy.

Ranks are virtual ranks on one GPU (one fused launch runs them all) or one
rank per GPU of ``gpus`` in this process, with peer access (runtime/world.py).
Nothing here imports CuPy at module import: the class is read (its
parameters, its availability) on machines without a GPU.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from purlin_bench.backends.cupy.defaults import DEFAULTS
from purlin_bench.backends.cupy.runtime.runner import DEFAULT_TIMEOUT_S, PARAMS, CupyRunner, KernelSettings
from purlin_bench.backends.port import PROCS_SHARED, Backend, TimingPolicy, check_params
from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import DTYPES, resolve_dtype
from purlin_bench.base.errors import ExecutionError, PurlinError
from purlin_bench.base.hardware import Fingerprint
from purlin_bench.program.model import Program
from purlin_bench.spec.roofline import Bandwidth
from purlin_bench.spec.instance import Instance
from purlin_bench.base.timing import Timing

class CupyBackend(Backend):
    name = "cupy"
    description = "GPU: the Atom kernel through CuPy"
    params = PARAMS
    runs_in_procs = True
    variable_sizes = True

    def __init__(
        self,
        ranks: int,
        gpus: tuple[int, ...] | None = None,
        seed: int = 0,
        procs: Any = None,
        timeout_s: float | None = None,
        split_launches: bool = False,
        settings: KernelSettings | None = None,
    ):
        super().__init__(ranks, gpus, seed, procs)
        if timeout_s is None:
            # Ranks in processes time-slice one GPU (milliseconds a wait):
            # their watchdog gets the run's bound, not the one-launch 5 s.
            timeout_s = max(DEFAULT_TIMEOUT_S, procs.watchdog_s) if procs else DEFAULT_TIMEOUT_S
        # The test mode's jitter comes from the environment, so that every
        # process of a run (they share it) builds the same kernels.
        settings = KernelSettings.from_environ() if settings is None else settings
        self.timeout_s, self.split_launches, self.settings = timeout_s, split_launches, settings
        self._world = None

    @classmethod
    def available(cls) -> str | None:
        try:
            import cupy
        except ImportError:
            return "CuPy is not installed (in a checkout: pip install -e '.[cuda13]', or '.[cuda12]' for CUDA 12)"
        try:
            n = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CuPy raises its own CUDARuntimeError types
            return f"no usable CUDA GPU ({type(exc).__name__}: {exc})"
        return None if n >= 1 else "no CUDA GPU found"

    @classmethod
    def device_count(cls) -> int:
        if cls.available() is not None:
            return 0
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())

    def join_run(self) -> None:
        # The CUDA IPC world exchanges every rank's device over the group:
        # made lazily by rank 0's copy_bandwidth(), it waited 600 s for
        # workers that were waiting for a command.
        if self.procs is not None:
            _ = self.world

    @property
    def world(self):
        from purlin_bench.backends.cupy.runtime.world import World

        if self._world is None:
            if self.procs is not None:
                from purlin_bench.backends.cupy.runtime.ipc import IpcWorld

                self._world = IpcWorld(self.ranks, self.procs)
            else:
                self._world = World(self.ranks, self.gpus, self.split_launches)
        return self._world

    @property
    def fused(self) -> bool:
        return super().fused and not self.split_launches and self.procs is None

    def describe(self) -> str:
        return self.world.describe()

    def fingerprint(self) -> Fingerprint:
        from purlin_bench.backends.cupy.runtime.device import fingerprint

        if self.procs is not None:
            world = self.world
            return fingerprint(self.ranks, (world.device,), procs=(self.ranks, world.gpus))
        return fingerprint(self.ranks, self.gpus)

    def environment(self) -> dict[str, Any]:
        from purlin_bench.backends.cupy.runtime.device import environment

        return {**super().environment(), **environment((self.world.device,) if self.procs else self.gpus or (0,))}

    def default_config(self, inst: Instance, config: RunConfig) -> RunConfig:
        from purlin_bench.backends.cupy.codegen.lower import MAX_SRC

        plan = dict(config.plan_params)
        if inst.op == "reduce" and inst.ranks > MAX_SRC and config.strategy != "ring":
            # One step of every other strategy reduces a source per rank; the
            # datapath takes at most MAX_SRC, a ring step two.
            config = RunConfig.make("ring", plan)
        # Copy engines take their sizes when a call is enqueued: never for sizes that come per call (D44).
        if inst.op != "reduce" and self.fused and config.strategy == "push" and not inst.variable:
            single = all(len(f.consumer_ranks()) == 1 for f in inst.flows)
            smallest = min((f.count for f in inst.flows), default=0) * inst.itemsize
            if single and smallest >= DEFAULTS.ce_min_flow_bytes:  # D5
                plan["channels"] = 1
                return RunConfig.make(config.strategy, plan, {"datapath": "ce"})
        largest = max(*inst.in_counts, *inst.out_counts) * inst.itemsize
        kernel = {}
        # Ranks as processes too: their waits and notifies on every peer go
        # at once there (codegen/compiled.py), one at a time in the interpreter.
        one_gpu_or_procs = self.fused or self.procs is not None
        # Parity scratch runs compiled or not at all (runner.py), whatever D12 says of its size.
        within = largest <= DEFAULTS.compiled_max_bytes or self._parity(inst, config)  # D12
        # A variable launch on one GPU that waits on nothing pools its blocks over every op
        # (codegen/variable.py), which the interpreter cannot: past D12's bound too (D53).
        within = within or (inst.variable and self.fused and self._pools(inst, config))
        if one_gpu_or_procs and within and inst.ranks <= DEFAULTS.compiled_max_ranks and self._compiles(inst, config):
            small = largest <= DEFAULTS.compiled_small_bytes  # D13
            kernel = {"kernel": "compiled", **({"threads": DEFAULTS.compiled_small_threads} if small else {})}
        if inst.op == "reduce":
            return RunConfig.make(config.strategy, plan, kernel)
        # Copies have no reduction's loads to batch (D4).
        return RunConfig.make(config.strategy, plan, {"unroll": DEFAULTS.copy_unroll, **kernel})

    @staticmethod
    def _program(inst: Instance, config: RunConfig, inplace: bool = False):
        """``config``'s program for ``inst`` in any dtype of its element size
        (a program's ops depend on the size alone); PurlinError if none."""
        from purlin_bench.strategies.derive import derive_program

        dtype = next(name for name, d in DTYPES.items() if d.itemsize == inst.itemsize)
        redop = "sum" if inst.op == "reduce" else None
        return derive_program(inst, config.strategy, dtype, redop, dict(config.plan_params), inplace)

    @classmethod
    def _parity(cls, inst: Instance, config: RunConfig) -> bool:
        """Whether ``config``'s program keeps parity scratch (push-parity where it applies)."""
        try:
            return cls._program(inst, config).parity_scratch
        except PurlinError:
            return False

    @classmethod
    def _pools(cls, inst: Instance, config: RunConfig) -> bool:
        """Whether ``config``'s one launch for ``inst`` waits on and notifies no flag and has few
        enough ops to pool (the generator's own tests; it also checks that no two ops of a group
        overlap, which needs the launch's buffer layout: a launch failing only that is unmeasured)."""
        from purlin_bench.backends.cupy.codegen import variable
        from purlin_bench.backends.cupy.codegen.compiled import has_flags
        from purlin_bench.backends.cupy.codegen.lower import flag_id, lower

        try:
            lowered = lower(cls._program(inst, config), list(range(inst.ranks)), True, "sm", flag_id)
        except PurlinError:
            return False
        return lowered.sizes is not None and not has_flags(lowered) and variable.few_enough(variable.var_ops(lowered))

    @classmethod
    def _compiles(cls, inst: Instance, config: RunConfig) -> bool:
        """Whether ``config``'s program, in and out of place, stays within
        the compiled kernel's build bound (a user's small --slice-bytes can
        make thousands of ops: the interpreter runs those)."""
        from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, build_weight
        from purlin_bench.backends.cupy.codegen.lower import flag_id, lower

        for inplace in (False, True) if inst.inplace_refusal() is None else (False,):
            try:
                program = cls._program(inst, config, inplace)
                if build_weight(lower(program, list(range(inst.ranks)), True, "sm", flag_id)) > MAX_BUILD_WEIGHT:
                    return False
            except PurlinError:
                return False  # the run will say why, on whichever datapath
        return True

    def warm_up(self, dtype: str, redop: str | None) -> int:
        """Build every kernel variant a runner could ask for (each unroll and
        block size, with and without the reduce code), so that a timed
        search does not spend its time in the compiler: on a fresh machine a
        tune's 3 s studies ended after 1 of 16 trials. Returns how many
        variants there are (compiled or found in cache)."""
        from purlin_bench.backends.cupy.codegen.atoms import snac_kernel

        world = self.world
        sys_scope = world.sys_scope
        choices = {p.name: p.choices for p in PARAMS}
        built = 0
        for device in sorted(set(world.devices)):
            for unroll in choices["unroll"]:
                for block in choices["threads"]:
                    for copy_only in (False, True):
                        snac_kernel(
                            dtype,
                            redop or "sum",
                            unroll,
                            block,
                            device,
                            sys_scope,
                            copy_only,
                            self.settings.defines(copy_only, block),
                        )
                        built += 1
        return built

    def faulted(self) -> bool:
        """Whether a call of any runner of this process recorded a timeout or
        an abort not yet reset (a host-memory read: no sync)."""
        from purlin_bench.backends.cupy.runtime import status

        return bool(status._pool) and status.pool().faulted()

    def guard(self) -> "device_errors":
        return device_errors()

    def copy_bandwidth(self) -> Bandwidth:
        from purlin_bench.backends.cupy.runtime.device import measure_copy_bandwidth

        return measure_copy_bandwidth(self.world.devices)

    def rank_layout(self) -> str:
        # Processes sharing a GPU are a layout of their own: NCCL refuses it
        # (purlin_bench/baselines/ says which baselines run where).
        if self.procs is not None and self.world.shared_gpu:
            return PROCS_SHARED
        return super().rank_layout()

    def prepare(self, program: Program, sets: int = 1, **params: Any) -> CupyRunner:
        if program.parity_scratch and "kernel" not in params:
            # Parity scratch runs compiled or not at all (runner.py): with no datapath asked for
            # (check --strategy push-parity), the program's only one rather than a refusal.
            params = {**params, "kernel": "compiled"}
        checked = check_params(type(self), params)
        with device_errors():
            return CupyRunner(
                self.world, program, timeout_s=self.timeout_s, sets=sets, settings=self.settings, **checked
            )

    def source(self, program: Program, bounded: bool = True, **params: Any) -> str:
        """The compiled datapath's CUDA C++ for ``program`` on virtual ranks
        (one fused launch), ``blocks`` as given or sized from the data (no
        device to cap it by), and the build options it compiles with;
        ``bounded=False`` past the build bound too (to time such builds)."""
        from purlin_bench.backends.cupy.codegen.atoms import compile_options, source_text
        from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, BaseLayout, generate, with_options
        from purlin_bench.backends.cupy.runtime.runner import (
            copies_only,
            data_blocks,
            group_blocks,
            sizing_lowerings,
            useful_blocks,
        )

        checked = check_params(type(self), params)
        low = sizing_lowerings(program, True, checked["datapath"])[0]
        itemsize = resolve_dtype(program.dtype)[1].itemsize
        auto = data_blocks([low], itemsize, self.settings.auto_block_bytes)
        blocks = group_blocks(
            checked["blocks"], auto, useful_blocks([low], itemsize, checked["threads"]), self.settings.cap_blocks
        )
        copy_only = self.settings.copy_only_build and copies_only([low])
        options = compile_options(
            program.dtype,
            program.redop or "sum",
            checked["unroll"],
            checked["threads"],
            False,
            copy_only,
            self.settings.defines(copy_only, checked["threads"]),
        )
        return with_options(
            options,
            generate(
                low,
                program.ranks,
                blocks,
                source_text(),
                BaseLayout.of(program, itemsize),
                MAX_BUILD_WEIGHT if bounded else None,
                jitter=bool(self.settings.jitter_ns),
                scratch_shift=program.scratch_shift(1) * itemsize,
            ),
        )

    def reference(self, runner: CupyRunner, inst: Instance, inputs: Sequence[np.ndarray]):
        from purlin_bench.backends.cupy.runtime.reference import DeviceReference

        if inst.variable:
            from purlin_bench.backends.cupy.runtime.reference import VariableReference

            return VariableReference(runner, inst, inputs)
        with device_errors():
            return DeviceReference(runner, inst, inputs)

    def time(self, candidates: Sequence[Any], policy: TimingPolicy, between=None) -> list[Timing]:
        from purlin_bench.backends.cupy.runtime.timing import time_side_by_side

        with device_errors():
            return time_side_by_side(
                candidates, self.world.devices[0], policy.iters, policy.warmup, policy.reps, policy.graph, between
            )


class device_errors:
    """CUDA's own errors (out of memory, launch failures) become
    ExecutionError, so a tuner records the configuration as invalid instead
    of dying, and the CLI prints one line."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or isinstance(exc, PurlinError):
            return False
        if type(exc).__module__.startswith(("cupy", "cupy_backends")):
            raise ExecutionError(f"{type(exc).__name__}: {exc}") from None
        return False


BACKEND = CupyBackend
