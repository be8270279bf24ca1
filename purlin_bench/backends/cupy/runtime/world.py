"""Where ranks live on GPUs, and the symmetric buffers they use.

A :class:`World` maps R ranks to devices: R *virtual* ranks on one GPU (the
default; one fused launch covers them all), or one rank per GPU in this
process with peer access between every pair (one launch per rank). The
arena hands out per-rank in/out/scratch buffers that grow as needed and are
reused across programs, so a sweep of sizes or a tuning run does not
reallocate for every configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from purlin_bench.base.errors import ExecutionError


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    sms: int
    compute_capability: str
    memory_bytes: int


def device_info(index: int) -> DeviceInfo:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(index)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return DeviceInfo(
        index,
        name,
        int(props["multiProcessorCount"]),
        f"{props['major']}.{props['minor']}",
        int(props["totalGlobalMem"]),
    )


class World:
    def __init__(self, ranks: int, devices: tuple[int, ...] | None = None, split_launches: bool = False):
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        if devices is None:
            devices = (cupy.cuda.runtime.getDevice(),) * ranks
        if len(devices) != ranks:
            raise ExecutionError(f"{ranks} ranks but {len(devices)} devices were given")
        for d in devices:
            if not 0 <= d < count:
                raise ExecutionError(f"GPU {d} does not exist (this machine has {count})")
        self.ranks = ranks
        self.devices = tuple(devices)
        # One launch for every rank needs them on one device; split_launches
        # forces one launch per rank even then, which exercises the multi-GPU
        # protocol (ready/done flags, per-rank streams) on a single GPU.
        self.fused = len(set(self.devices)) == 1 and not split_launches
        self._enable_peer_access()
        self.info = {d: device_info(d) for d in set(self.devices)}
        self._arena: dict[tuple[int, int, str], object] = {}
        # The ranks this process launches (ipc.IpcWorld: only its own), and
        # whether flags cross devices (system-scope release/acquire).
        self.local_ranks = tuple(range(ranks))
        self.sys_scope = len(set(self.devices)) > 1
        # Processes whose launches share each GPU with this one's (one: this
        # process alone; occupancy.py).
        self.sharing = 1

    def _enable_peer_access(self) -> None:
        import cupy

        distinct = sorted(set(self.devices))
        for a in distinct:
            for b in distinct:
                if a == b:
                    continue
                if not cupy.cuda.runtime.deviceCanAccessPeer(a, b):
                    raise ExecutionError(
                        f"GPU {a} cannot access GPU {b} directly (no peer access): one rank per GPU needs NVLink or "
                        f"PCIe peer access"
                    )
                with cupy.cuda.Device(a):
                    try:
                        cupy.cuda.runtime.deviceEnablePeerAccess(b)
                    except cupy.cuda.runtime.CUDARuntimeError as exc:
                        if "PeerAccessAlreadyEnabled" not in str(exc) and "already" not in str(exc).lower():
                            raise ExecutionError(
                                f"enabling peer access from GPU {a} to GPU {b} failed: {exc}"
                            ) from None

    def describe(self) -> str:
        names = sorted({self.info[d].name for d in self.devices})
        if len(set(self.devices)) == 1:
            how = "fused launch" if self.fused else "one launch per rank"
            return f"{self.ranks} virtual ranks on {names[0]} (GPU {self.devices[0]}, {how})"
        return f"{self.ranks} ranks, one per GPU ({', '.join(map(str, self.devices))}: {', '.join(names)}), peer access"

    def buffers(self, slot: int, needs: list[tuple[int, str, int]]) -> dict[tuple[int, str], object]:
        """Device arrays of at least the asked bytes for (rank, buffer) in buffer set ``slot``."""
        return {(r, b): self.buffer(slot, r, b, n) for r, b, n in needs}

    def agreed_blocks(self, blocks: int) -> int:
        """Blocks a group every launch takes: one process sizes them all."""
        return blocks

    def symmetric_words(self, counts: list[int]) -> list[object]:
        """Zeroed uint64 words per rank, on its device (flags, abort, parity scratch)."""
        import cupy

        out = []
        for r, n in enumerate(counts):
            with cupy.cuda.Device(self.devices[r]):
                # Parity scratch comes from here too, and can be large: a refusal, not a crash.
                out.append(_allocated(lambda: cupy.zeros(max(1, n), dtype=cupy.uint64), f"{8 * n} bytes for rank {r}"))
        return out

    def buffer(self, slot: int, rank: int, buf: str, nbytes: int):
        """A uint8 device array of at least ``nbytes`` for (buffer set, rank, buffer)."""
        import cupy

        key = (slot, rank, buf)
        have = self._arena.get(key)
        if have is None or have.nbytes < nbytes:
            self._arena.pop(key, None)
            with cupy.cuda.Device(self.devices[rank]):
                # At least 256 bytes: every slice pointer is then a valid, aligned address.
                self._arena[key] = _allocated(
                    lambda: cupy.empty(max(256, nbytes), dtype=cupy.uint8), f"{nbytes} bytes for rank {rank} {buf}"
                )
        return self._arena[key]


def _allocated(make, what: str):
    """``make()`` on the current device; once more after CuPy's pool lets go
    of its cached blocks; else an ExecutionError saying ``what`` did not fit."""
    import cupy

    try:
        return make()
    except cupy.cuda.memory.OutOfMemoryError:
        cupy.get_default_memory_pool().free_all_blocks()
        try:
            return make()
        except cupy.cuda.memory.OutOfMemoryError:
            raise ExecutionError(f"out of GPU memory allocating {what}") from None
