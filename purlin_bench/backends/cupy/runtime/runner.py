"""The GPU executor: runs SNAC programs with the Atom kernel through CuPy.

A program is lowered once (codegen/lower.py) into a step table per launch, uploaded
with its buffer pointer tables, and then launched as often as asked, eagerly
or captured in a CUDA graph. Flags and per-block epochs live in device memory
and advance in the kernel, so replays need no host work. Every wait is bounded:
a wait that runs past ``timeout_s`` records rank, channel, step and flag in a
status word, raises the shared abort word (so every other waiter leaves too),
and the host turns it into a WatchdogTimeout after resetting the flags, so the
process can run the next collective.
"""

from __future__ import annotations

from purlin_bench.backends.cupy.runtime.buffers import RunnerBuffers
from purlin_bench.backends.cupy.codegen.lower import Lowered, lower
from purlin_bench.backends.cupy.runtime.launch import KINDS, InterpretedLaunch, Launch, _np_storage
from purlin_bench.backends.cupy.runtime.occupancy import capacity, check_coresidency
from purlin_bench.backends.cupy.runtime.settings import KernelSettings
from purlin_bench.backends.cupy.runtime.sizing import (  # noqa: F401 - re-exported: tests and the backend size by them
    MAX_BLOCKS,
    copies_only,
    data_blocks,
    group_blocks,
    sizing_lowerings,
    useful_blocks,
)
from purlin_bench.backends.cupy.runtime.status import BAD_COUNTS, TIMED_OUT
from purlin_bench.backends.cupy.runtime.status import describe as describe_status
from purlin_bench.backends.cupy.runtime.timing import StreamCandidate
from purlin_bench.backends.cupy.runtime.world import World
from purlin_bench.base.config import Param
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import CallAborted, CapacityError, CountsError, ExecutionError, WatchdogTimeout
from purlin_bench.program.model import FlagRef, Program, Ref

DEFAULT_TIMEOUT_S = 5.0


PARAMS = (
    Param(
        "blocks",
        0,
        minimum=0,
        maximum=MAX_BLOCKS,
        help="most thread blocks per (rank, channel) list (idle ones past the data's need and the automatic count "
            "are dropped); 0 sizes them from the data",
    ),
    # No 1024: at 64 registers a thread the step interpreter spills (see tests/kernels/test_atoms_compile.py).
    Param("threads", 512, choices=(128, 256, 512), help="threads per block"),
    # Copy engines take their sizes when a call is enqueued: SMs for sizes per call (D44).
    Param(
        "datapath",
        "sm",
        choices=("sm", "ce"),
        variable_choices=("sm",),
        help="opening stages on SMs or on copy engines (cudaMemcpyAsync)",
    ),
    Param("unroll", 2, choices=(1, 2, 4), help="16-byte vectors in flight per thread"),
    Param(
        "kernel",
        "interpreted",
        choices=tuple(KINDS),
        variable_choices=tuple(label for label, kind in KINDS.items() if kind.variable_sizes),
        help="the step interpreter (atoms/snac.cu), or CUDA C++ generated for the program (compiled once per machine "
            "by NVRTC, cached on disk)",
    ),
)


class CupyRunner(RunnerBuffers):
    def __init__(
        self,
        world: World,
        program: Program,
        blocks: int = 0,
        threads: int = 512,
        datapath: str = "sm",
        unroll: int = 2,
        kernel: str = "interpreted",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        sets: int = 1,
        settings: KernelSettings = KernelSettings(),
    ):
        import cupy

        if datapath == "ce" and not world.fused:
            raise ExecutionError("datapath 'ce' needs every rank in one launch (virtual ranks on one GPU)")
        if kernel not in KINDS:  # the backend checks its parameters first; a direct caller may not
            raise ExecutionError(f"unknown kernel '{kernel}' (known: {', '.join(KINDS)})")
        if program.parity_scratch and (kernel != "compiled" or datapath != "sm"):
            # Its scratch half moves with the call's epoch, which only the generated code reads.
            raise CapacityError(
                f"{program.collective}/{program.strategy} uses parity scratch, which only the compiled datapath on "
                f"SMs runs (kernel=compiled, datapath=sm)"
            )
        if program.variable and not KINDS[kernel].variable_sizes:
            raise ExecutionError(f"the {kernel} datapath needs fixed sizes; a variable-size program runs interpreted")
        if program.ranks != world.ranks:
            raise ExecutionError(f"program has {program.ranks} ranks, the world {world.ranks}")
        self.world, self.program, self.settings = world, program, settings
        self.threads, self.datapath, self.unroll = threads, datapath, unroll
        # How the launches run the program (KINDS: the interpreter, or code generated for it).
        self.kind, self.build_s = KINDS[kernel], 0.0
        self.timeout_ns = int(timeout_s * 1e9)
        _, self.dtype = resolve_dtype(program.dtype)
        self.storage = _np_storage(self.dtype)
        self.itemsize = self.dtype.itemsize
        self.sets = max(1, sets)
        R = program.ranks
        # Rank 0's words hold one more: the abort word every waiter reads
        # (shared by every process of a run, like the flags).
        counts = list(program.flag_counts)
        counts[0] = max(1, counts[0]) + 1
        self.flags = world.symmetric_words(counts)
        self.abort = self.flags[0][counts[0] - 1 :].view(cupy.int32)[:1]
        # A variable program's counts per rank and buffer set, int64 [sets, N]:
        # symmetric like the flags, so the process that loads every rank's
        # inputs (procs.py's driver) writes every rank's counts too; rank r's
        # kernel reads its own (a fused launch, rank 0's).
        self.counts: list[object] = []
        if program.variable:
            n = len(program.count_caps)
            words = world.symmetric_words([self.sets * n] * R)
            self.counts = [w[: self.sets * n].view(cupy.int64).reshape(self.sets, n) for w in words]

        def flag_address(flag: FlagRef) -> int:
            return self.flags[flag.rank].data.ptr + 8 * flag.index

        launch_ranks = [list(range(R))] if world.fused else [[r] for r in world.local_ranks]
        lowered = [lower(program, ranks, world.fused, datapath, flag_address) for ranks in launch_ranks]
        # With ranks in processes this process lowered its own rank only.
        sizing = lowered if sum(map(len, launch_ranks)) == R else sizing_lowerings(program, False, datapath)
        # The same kernel variant on every process: its registers bound the blocks.
        self.copy_only = settings.copy_only_build and copies_only(sizing)
        auto = self._auto_blocks(sizing)
        self.blocks = world.agreed_blocks(
            group_blocks(blocks, auto, useful_blocks(sizing, self.itemsize, threads), settings.cap_blocks)
        )
        self.launches: list[Launch] = []
        self._held: list[object] = []
        try:
            for ranks, low in zip(launch_ranks, lowered):
                if low.group_count or low.ce_copies:
                    # A launch of copy-engine stages only has no steps to generate code for.
                    kind = self.kind if low.group_count else InterpretedLaunch
                    self.launches.append(kind(self, ranks, low))
            self._check_coresidency()
            self.bases = [self._base_table(s) for s in range(self.sets)]
        except BaseException:
            # A refused or failed runner gives its status slots back: check
            # and tune meet refusals all the time.
            for launch in self.launches:
                launch.slot.pool.release(launch.slot)
            self.launches = []
            raise
        for launch in self.launches:
            launch.bind(self)
        self.ce_streams = {}
        self._main_stream = None
        # (stream, rank, slot) -> what enqueue made of it once: the stream view, addresses, bytes
        self._stream_calls: dict[tuple[int, int, int], tuple] = {}
        # A variable program's counts, per buffer set: on the host (what the
        # reference checks against) and per launch device (what the kernel
        # reads; a Communicator fills them on its stream, from device counts).
        self.loaded: dict[int, tuple[int, ...]] = {}
        # One kernel on the world's first device and no copy-engine stage.
        self._single = (
            len(self.launches) == 1
            and self.launches[0].device == self.world.devices[0]
            and not self.launches[0].lowered.ce_copies
            and bool(self.launches[0].grid)
        )

    # -- setup ---------------------------------------------------------------
    def _auto_blocks(self, lowered: list[Lowered]) -> int:
        # Sized so that the launch with the most groups fits (with ranks in
        # processes each launch has its device, or time slices of it, alone);
        # split launches sharing a GPU are refused together when they do
        # not fit (_check_coresidency).
        groups = max((low.group_count for low in lowered), default=1) or 1
        cap = max(1, self._capacity(self.world.devices[0]) // groups)
        return min(cap, data_blocks(lowered, self.itemsize, self.settings.auto_block_bytes))

    def _capacity(self, device: int) -> int:
        """Blocks of this kernel this process may keep resident on ``device`` (occupancy.capacity)."""
        return capacity(self, device)

    def _check_coresidency(self) -> None:
        check_coresidency(self)

    # -- running ---------------------------------------------------------------
    def _side_stream(self, rank: int):
        import cupy

        if rank not in self.ce_streams:
            with cupy.cuda.Device(self.world.devices[rank]):
                self.ce_streams[rank] = cupy.cuda.Stream(non_blocking=True)
        return self.ce_streams[rank]

    def launch(self, stream, slot: int = 0) -> None:
        """Enqueue one call on ``stream`` (capturable into a CUDA graph):
        copy-engine stages on per-rank side streams, then the kernel(s)."""
        import cupy

        if self._single:
            # One kernel on the caller's stream, nothing to fork or join:
            # the path every call of a process's rank takes.
            launch = self.launches[0]
            if cupy.cuda.runtime.getDevice() != launch.device:  # a device switch only where one is needed
                with cupy.cuda.Device(launch.device):
                    return self.launch(stream, slot)
            launch.enqueue(self, stream.ptr, slot)
            return
        start = cupy.cuda.Event(disable_timing=True)
        start.record(stream)
        joins = []
        for launch in self.launches:
            for copy in launch.lowered.ce_copies:
                side = self._side_stream(copy.rank)
                side.wait_event(start)
                src, dst = self._address(copy.src, slot), self._address(copy.dst, slot)
                with cupy.cuda.Device(self.world.devices[copy.rank]):
                    cupy.cuda.runtime.memcpyAsync(
                        dst, src, copy.src.count * self.itemsize, cupy.cuda.runtime.memcpyDefault, side.ptr
                    )
        for side in self.ce_streams.values():
            done = cupy.cuda.Event(disable_timing=True)
            done.record(side)
            stream.wait_event(done)
        single = len(self.launches) == 1 and self.launches[0].device == self.world.devices[0]
        for launch in self.launches:
            if not launch.grid:
                continue
            target = stream if single else launch.stream
            if not single:
                target.wait_event(start)
            args = launch.arguments(self, slot)
            with cupy.cuda.Device(launch.device):
                # The module's function, not RawKernel's call: the cooperative
                # flag is chosen per launch there (CuPy fixes it per RawKernel).
                launch.kernel.kernel(
                    (launch.grid,), (self.threads,), args, stream=target, enable_cooperative_groups=launch.cooperative
                )
            if not single:
                ev = cupy.cuda.Event(disable_timing=True)
                ev.record(target)
                joins.append(ev)
        for ev in joins:
            stream.wait_event(ev)

    def enqueue(self, stream: int, rank: int, src: int, dst: int, counts: int = 0, slot: int = 0) -> None:
        """StreamRunner.enqueue: copy in, counts, launch, copy out, all on ``stream``.

        Within a call the program's flags order every access to the shared
        buffers: a peer touches this rank's input and output only after its
        "ready" notify (after the copy-in, on this stream), and the kernel
        ends only once every peer that touched them sent "done" (parity
        scratch, written without either, is neither). So the next call's
        copy-in (after this kernel) races no peer, and the copy-out reads
        finished data. The stream's CuPy view and the addresses are made
        once per (stream, rank, slot): a call makes no CuPy object."""
        import cupy

        call = self._stream_calls.get((stream, rank, slot))
        if call is None:
            call = self._stream_calls[(stream, rank, slot)] = self._stream_call(stream, rank, slot)
        view, device, in_ptr, in_bytes, out_ptr, out_bytes, counts_ptr, counts_bytes = call
        if counts_bytes and not counts:
            raise ExecutionError(f"{self.program.collective} takes its counts per call: none were given")
        rt = cupy.cuda.runtime
        if rt.getDevice() != device:
            with cupy.cuda.Device(device):
                return self.enqueue(stream, rank, src, dst, counts, slot)
        if in_bytes and src != in_ptr:  # equal: the caller's tensor is the buffer (zero-copy)
            rt.memcpyAsync(in_ptr, src, in_bytes, rt.memcpyDeviceToDevice, stream)
        if counts_bytes:  # on the stream: a graph replays it with the counts of each replay
            rt.memcpyAsync(counts_ptr, counts, counts_bytes, rt.memcpyDeviceToDevice, stream)
        if self._single:  # the raw handle: no stream object a call
            self.launches[0].enqueue(self, stream, slot)
        else:
            self.launch(view, slot)
        if out_bytes and dst != out_ptr:
            rt.memcpyAsync(dst, out_ptr, out_bytes, rt.memcpyDeviceToDevice, stream)

    def buffers(self, rank: int, slot: int = 0) -> tuple[int, int, int, int]:
        """StreamRunner.buffers: this rank's buffers, on its own device.

        A peer touches them only between this rank's "ready" and the end of
        its kernel, both ordered on the caller's stream: what the caller does
        to them on that stream before or after a call races no peer."""
        n_in, n_out = self.program.in_counts[rank], self.program.out_counts[rank]
        in_ptr = self._address(Ref(rank, "in", 0, 0), slot) if n_in else 0
        out_ptr = self._address(Ref(rank, "out", 0, 0), slot) if n_out else 0
        return in_ptr, n_in * self.itemsize, out_ptr, n_out * self.itemsize

    def _stream_call(self, stream: int, rank: int, slot: int) -> tuple:
        import cupy

        device = self.world.devices[rank]
        in_ptr, in_bytes, out_ptr, out_bytes = self.buffers(rank, slot)
        counts_bytes = 8 * len(self.program.count_names) if self.program.variable else 0
        counts_ptr = self.counts_address(slot) if counts_bytes else 0
        view = cupy.cuda.ExternalStream(stream, device)
        return view, device, in_ptr, in_bytes, out_ptr, out_bytes, counts_ptr, counts_bytes

    def main_stream(self):
        import cupy

        # A blocking stream: it orders after work on the legacy default stream
        # (input uploads, poisoning, baselines), so no call races its setup.
        if self._main_stream is None:
            with cupy.cuda.Device(self.world.devices[0]):
                self._main_stream = cupy.cuda.Stream(non_blocking=False)
        return self._main_stream

    def failure(self) -> str | None:
        """The error an earlier call of this runner recorded, without a sync
        (the status words are host-mapped): a timeout, or a call aborted
        because another wait timed out. None while every call went well."""
        for launch in self.launches:
            p = self.program
            said = describe_status(launch.slot.words, p.collective, p.strategy, p.count_caps, p.count_names)
            if said:
                return said
        return None

    def check_status(self) -> None:
        import cupy

        said = self.failure()
        if said is None and self.world.local_ranks != tuple(range(self.program.ranks)):
            # One process per rank: another rank's watchdog raised the shared
            # abort word (in rank 0's memory) though no wait of this rank saw it.
            if int(cupy.asnumpy(self.abort)[0]):
                said = (
                    f"watchdog: another rank's wait timed out in "
                    f"{self.program.collective}/{self.program.strategy}, and this rank's call was aborted"
                )
        self.raise_counts_error(said)
        if said is not None:
            # Every rank resets and rank 0 clears the abort word (procs.py).
            self.reset()
            raise (WatchdogTimeout if said.startswith(TIMED_OUT) else CallAborted)(said)

    def raise_counts_error(self, said: str | None = None) -> None:
        """Raise (CountsError) a count out of range that a call met on the
        device, and forget it: that call ran clamped and its flags are sound,
        so the runner goes on (unlike after a timeout)."""
        said = self.failure() if said is None else said
        if said is not None and said.startswith(BAD_COUNTS):
            for launch in self.launches:
                launch.slot.clear()
            raise CountsError(said)

    def reset(self) -> None:
        """Zero flags, epochs, status and abort after a timeout: the next call starts clean."""
        import cupy

        # Each process zeroes what it owns; with one process per rank, every
        # rank resets after every rank has left the failed call (procs.py).
        for r in self.world.local_ranks:
            with cupy.cuda.Device(self.world.devices[r]):
                self.flags[r].fill(0)
        for launch in self.launches:
            with cupy.cuda.Device(launch.device):
                launch.epochs.fill(0)
        self.synchronize()
        for launch in self.launches:
            launch.slot.clear()

    def synchronize(self, stream=None) -> None:
        """Wait for ``stream`` (if given), then for every device of the world."""
        import cupy

        if stream is not None:
            stream.synchronize()
        for d in set(self.world.devices):
            cupy.cuda.Device(d).synchronize()

    def run(self, slot: int = 0) -> None:
        """One checked call on buffer set ``slot``: poison outputs, launch, wait."""
        stream = self.main_stream()
        with stream:
            self.poison(slot)
        self.launch(stream, slot)
        self.synchronize(stream)
        self.check_status()

    def candidate(self) -> StreamCandidate:
        """This runner as a timing candidate (see timing), cycling the buffer sets."""

        def enqueue(target, i: int) -> None:
            self.launch(target, i % self.sets)

        def settle() -> None:
            self.synchronize()
            self.check_status()

        return StreamCandidate(enqueue, self.main_stream(), settle)

    def close(self) -> None:
        self.synchronize()
        self._held.clear()
        self.bases = []
        for launch in self.launches:
            launch.slot.pool.release(launch.slot)
        self.launches = []
