"""One process per rank on GPUs: symmetric buffers shared through CUDA IPC.

Each process owns one rank and allocates its own buffers (input, output,
scratch per buffer set, its flag words, and on rank 0 the run's abort word)
as dedicated ``cudaMalloc`` allocations: the IPC handle of a pool
sub-allocation would cover its whole pool block. The handles go to every
other rank over the run's group, and each opens its peers' ones, so every
process addresses every rank's buffers. Allocation is collective: every rank
asks for the same buffers in the same order (they run the same program), so
one allgather of the handles per buffer set lines up.

As in :class:`~purlin_bench.backends.cupy.runtime.world.World`, buffers grow and are
kept for the next program of the run. Every pointer lives in this process's
context on its own device, so ``devices`` is that device for every rank;
``placement`` says where each rank really is.
"""

from __future__ import annotations

from purlin_bench.backends.cupy.runtime.world import DeviceInfo, device_info
from purlin_bench.procs.mps import gpu_scheduling
from purlin_bench.base.errors import ExecutionError


class _Opened:
    """A peer's allocation opened in this process; closed when dropped."""

    def __init__(self, ptr: int, nbytes: int):
        self.ptr, self.nbytes = ptr, nbytes

    def __del__(self) -> None:
        try:
            import cupy

            cupy.cuda.runtime.ipcCloseMemHandle(self.ptr)
        except Exception:  # interpreter teardown, or the context already gone
            pass


class IpcWorld:
    fused = False

    def __init__(self, ranks: int, procs):
        import cupy

        if ranks != procs.size:
            raise ExecutionError(f"{ranks} ranks but {procs.size} processes")
        count = cupy.cuda.runtime.getDeviceCount()
        device = procs.device if procs.device is not None else procs.rank % count
        if not 0 <= device < count:
            raise ExecutionError(f"rank {procs.rank}: GPU {device} does not exist (this machine has {count})")
        cupy.cuda.Device(device).use()
        self.procs, self.ranks, self.rank, self.device = procs, ranks, procs.rank, device
        self.devices = (device,) * ranks
        bus = cupy.cuda.runtime.deviceGetPCIBusId(device)
        where = procs.group.allgather((device, bus), "ipc-devices")
        self.placement = tuple(d for d, _ in where)
        self.gpus = len({b for _, b in where})
        self.info: dict[int, DeviceInfo] = {device: device_info(device)}
        self.local_ranks = (procs.rank,)
        self.sys_scope = True  # peers are other processes (and maybe other GPUs)
        # The ranks on this GPU are as many processes, whose kernels must
        # all be resident at once: each sizes its grids to its share.
        self.sharing = sum(1 for _, b in where if b == bus)
        self.scheduling = gpu_scheduling() if self.sharing > 1 else None
        self._arena: dict[tuple, object] = {}
        self._tags = 0

    @property
    def shared_gpu(self) -> bool:
        """Several ranks on one GPU: time-sliced, and NCCL refuses it."""
        return self.gpus < self.ranks

    def describe(self) -> str:
        name = self.info[self.device].name
        where = (
            f"{self.ranks} ranks, one process each, on {self.gpus} GPU{'s' if self.gpus > 1 else ''} ({name}, CUDA IPC)"
        )
        if self.scheduling is None:
            return where
        return f"{where}; {self.sharing} processes a GPU, {self.scheduling}"

    def _allocate(self, nbytes: int):
        import cupy

        try:
            return cupy.cuda.Memory(max(256, nbytes))
        except cupy.cuda.memory.OutOfMemoryError:
            raise ExecutionError(f"rank {self.rank}: out of GPU memory allocating {nbytes} bytes") from None

    def _as_array(self, ptr: int, nbytes: int, owner):
        import cupy

        mem = cupy.cuda.UnownedMemory(ptr, nbytes, owner, self.device)
        return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))

    def _exchange(self, mine: dict, step: str) -> dict[int, dict]:
        """Every rank's {key: (handle, nbytes)} of what it just allocated."""
        import cupy

        handles = {k: (bytes(cupy.cuda.runtime.ipcGetMemHandle(m.ptr)), m.size) for k, m in mine.items()}
        return dict(enumerate(self.procs.group.allgather(handles, step)))

    def _open(self, handle: bytes, nbytes: int):
        import cupy

        try:
            # Lazy peer access: a peer on another GPU is mapped over NVLink.
            ptr = cupy.cuda.runtime.ipcOpenMemHandle(handle)
        except cupy.cuda.runtime.CUDARuntimeError as exc:
            raise ExecutionError(f"rank {self.rank}: cannot open a peer's CUDA IPC handle: {exc}") from None
        opened = _Opened(ptr, nbytes)
        return self._as_array(ptr, nbytes, opened)

    def buffers(self, slot: int, needs: list[tuple[int, str, int]]) -> dict[tuple[int, str], object]:
        """Device arrays of at least the asked bytes for (rank, buffer) in
        buffer set ``slot``; collective (every rank calls with the same needs)."""
        grow = [(r, b, n) for r, b, n in needs if (k := (slot, r, b)) not in self._arena or self._arena[k].nbytes < n]
        if grow:
            mine = {(slot, r, b): self._allocate(n) for r, b, n in grow if r == self.rank}
            peers = self._exchange(mine, f"ipc-buffers-{slot}")
            for r, b, n in grow:
                key = (slot, r, b)
                if r == self.rank:
                    self._arena[key] = self._as_array(mine[key].ptr, mine[key].size, mine[key])
                else:
                    handle, size = peers[r][key]
                    self._arena[key] = self._open(handle, size)
        return {(r, b): self._arena[(slot, r, b)] for r, b, _ in needs}

    def agreed_blocks(self, blocks: int) -> int:
        """The fewest blocks a group that any rank asks for. Every rank sizes
        from the same ops, but caps by what fits on its own GPU (another
        model, a MIG slice), and a waiter expects its peers' count; collective."""
        return min(self.procs.group.allgather(blocks, "ipc-blocks"))

    def symmetric_words(self, counts: list[int]) -> list[object]:
        """Zeroed uint64 words per rank (``counts[r]`` of them, rank r's
        memory), for flags: a fresh set per runner, so a runner's epochs are its own."""
        import cupy

        self._tags += 1
        mine_mem = self._allocate(8 * max(1, counts[self.rank]))
        mine = {("words", self._tags): mine_mem}
        peers = self._exchange(mine, f"ipc-words-{self._tags}")
        out = []
        for r in range(self.ranks):
            if r == self.rank:
                words = self._as_array(mine_mem.ptr, mine_mem.size, mine_mem).view(cupy.uint64)
                words.fill(0)
            else:
                handle, size = peers[r][("words", self._tags)]
                words = self._open(handle, size).view(cupy.uint64)
            out.append(words)
        cupy.cuda.Device(self.device).synchronize()
        # Every rank's words are zero before any rank's kernel notifies one.
        self.procs.group.barrier(f"ipc-words-zeroed-{self._tags}")
        return out
