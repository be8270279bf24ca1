"""Launch status words the host reads without a sync.

A kernel whose wait times out records where (rank, channel, step, flag) in
its launch's status words and raises the run's abort word; every other wait
that sees the abort leaves its call and marks its own launch aborted
(atoms/snac.cu: STATUS_WORDS, mark_aborted). Those words live in pinned host
memory mapped into the device, so a caller (the Communicator, before every
call) learns that an earlier call failed with a memory read, not a stream
sync: an aborted call's outputs are never taken for data without an error.

One pool per process hands out a slot of ``WORDS`` int64 per launch from
pages of ``SLOTS`` slots, and keeps the summary word every slot points to.
"""

from __future__ import annotations

import ctypes

import numpy as np

WORDS = 16  # STATUS_WORDS in atoms/snac.cu
TIMEOUT, ABORTED, SUMMARY, BAD_COUNT = 0, 8, 9, 10  # its STATUS_ABORTED, STATUS_SUMMARY, STATUS_BAD_COUNT
SLOTS = 256
_PORTABLE, _MAPPED = 1, 2  # cudaHostAllocPortable, cudaHostAllocMapped


class StatusPool:
    """Host-mapped status slots, and one summary word that any launch's
    timeout or abort sets: ``faulted()`` is one memory read, cheap enough
    for every call of a serving stack's collective."""

    def __init__(self) -> None:
        self._pages: list[tuple[int, np.ndarray]] = []  # (device address, host int64 view [SLOTS, WORDS])
        self._free: list[tuple[int, int]] = []
        self._summary: tuple[int, np.ndarray] | None = None  # (device address, host view of one word)

    def _grow(self) -> None:
        import cupy

        rt = cupy.cuda.runtime
        nbytes = SLOTS * WORDS * 8
        # Portable | mapped: every context of this process may map it.
        host = rt.hostAlloc(nbytes, _PORTABLE | _MAPPED)
        view = np.ctypeslib.as_array((ctypes.c_int64 * (SLOTS * WORDS)).from_address(host)).reshape(SLOTS, WORDS)
        view[...] = 0
        page = len(self._pages)
        # With unified addressing (every 64-bit platform CUDA supports) a
        # mapped allocation's device address is its host address.
        self._pages.append((host, view))
        first = 0
        if self._summary is None:
            # The first page's first slot holds the summary word.
            self._summary = (self._pages[0][0], view[0])
            first = 1
        self._free.extend((page, i) for i in range(SLOTS - 1, first - 1, -1))

    def slot(self) -> "StatusSlot":
        if not self._free:
            self._grow()
        page, index = self._free.pop()
        address, view = self._pages[page]
        slot = StatusSlot(self, page, index, address + index * WORDS * 8, view[index])
        slot.clear()
        return slot

    def release(self, slot: "StatusSlot") -> None:
        slot.words[...] = 0
        self._free.append((slot.page, slot.index))
        self.recheck()

    def faulted(self) -> bool:
        """Whether any launch of this process recorded a timeout or an abort
        that its runner has not reset since."""
        return self._summary is not None and bool(self._summary[1][0])

    def recheck(self) -> None:
        """The summary again from every slot (after a runner reset its own).
        Zeroed first and only ever set after the scan: a kernel marking its
        slot meanwhile writes the summary after its slot (a fence between),
        so its mark is either seen by the scan or lands after the zero."""
        if self._summary is None:
            return
        self._summary[1][0] = 0
        for page, (_, view) in enumerate(self._pages):
            marks = view[1:] if page == 0 else view  # page 0's first slot is the summary itself
            if marks[:, TIMEOUT].any() or marks[:, ABORTED].any() or marks[:, BAD_COUNT].any():
                self._summary[1][0] = 1
                return


class StatusSlot:
    """One launch's words: ``words`` (host view) and ``device`` (a CuPy array
    over the same bytes, the kernel's ``status`` argument)."""

    def __init__(self, pool: StatusPool, page: int, index: int, address: int, words: np.ndarray):
        import cupy

        self.pool, self.page, self.index, self.words = pool, page, index, words
        mem = cupy.cuda.UnownedMemory(address, WORDS * 8, pool)
        self.device = cupy.ndarray((WORDS,), dtype=cupy.int64, memptr=cupy.cuda.MemoryPointer(mem, 0))

    def clear(self) -> None:
        """Zero this launch's record (after its runner reset) and point it at the summary."""
        self.words[...] = 0
        assert self.pool._summary is not None
        self.words[SUMMARY] = self.pool._summary[0]
        self.pool.recheck()


_pool: list[StatusPool] = []


def pool() -> StatusPool:
    """This process's pool (made on first use)."""
    if not _pool:
        _pool.append(StatusPool())
    return _pool[0]


TIMED_OUT = "watchdog: rank "  # how describe() starts a timeout (an abort starts otherwise)


BAD_COUNTS = "counts: "  # how describe() starts a count out of range on the device


def describe(words: np.ndarray, collective: str, strategy: str, caps: tuple[int, ...] = (),
             names: tuple[str, ...] = ()) -> str | None:
    """The error a launch's words record, or None. ``caps`` and ``names``:
    a variable program's count capacities and chunk names."""
    if words[TIMEOUT]:
        flag_rank, flag_index = int(words[4]) >> 20, int(words[4]) & 0xFFFFF
        return (
            f"{TIMED_OUT}{words[1]} channel {words[2]} step {words[3]} waited "
            f"{words[7] / 1e9:.2f} s on r{flag_rank}.flag[{flag_index}] (value {words[5]}, needed {words[6]}) "
            f"in {collective}/{strategy}; its notify never came"
        )
    if words[BAD_COUNT]:
        index, value = int(words[BAD_COUNT + 1]), int(words[BAD_COUNT + 2])
        name = f" ({names[index]})" if index < len(names) else ""
        cap = caps[index] if index < len(caps) else "its capacity"
        return (f"{BAD_COUNTS}{collective}'s count {index}{name} was {value} in device memory, outside 0..{cap}; "
                f"the call ran with it clamped, its outputs are not the call asked for")
    if words[ABORTED]:
        return f"watchdog: another rank's wait timed out in {collective}/{strategy}, and this rank's call was aborted"
    return None
