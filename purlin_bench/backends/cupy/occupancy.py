"""How many blocks of a kernel one process may keep resident on its GPU.

SNAC's waits spin: a block waits on a flag that other blocks, of its own
grid or of another rank's kernel, bump. That is safe only if every block it
waits on can hold an SM at the same time as it does. One process with all
ranks in one launch needs its own grid resident (a cooperative launch checks
and guarantees that). With one process per rank, several ranks may share a
GPU (several processes on one GPU under CUDA MPS run concurrently): then the
sum of their grids must fit, so each process takes its share. Pure arithmetic: tested without a GPU.
"""

from __future__ import annotations

from typing import Mapping


def blocks_per_sm(dev: Mapping[str, int], regs: int, threads: int) -> int:
    """Blocks of ``threads`` threads at ``regs`` registers a thread that one
    SM holds at once, by registers (allocated per warp in units of 256),
    threads and the per-SM block limit."""
    warps = -(-threads // 32)
    regs_per_warp = -(-regs * 32 // 256) * 256
    by_regs = dev["MaxRegistersPerMultiprocessor"] // max(1, regs_per_warp * warps)
    by_threads = dev["MaxThreadsPerMultiProcessor"] // threads
    by_blocks = dev.get("MaxBlocksPerMultiprocessor", 32)
    return max(0, min(by_regs, by_threads, by_blocks))


def resident_share(sms: int, per_sm: int, sharing: int) -> int:
    """Blocks this process may keep resident: what the SMs it sees hold,
    split among the ``sharing`` processes whose ranks share the GPU.

    ``sms`` is the device attribute, which under an MPS limit already holds
    the client's share (on the H200 under MPS: 132 SMs, 14 at 12%, 66 at
    50%). MPS does not promise clients disjoint SMs, so the split is of the
    SMs one client sees, not of the whole GPU: 8 clients at 12% each took
    14 blocks (112 SMs' worth) and a wait starved at 256 KiB."""
    return max(0, sms * per_sm // max(1, sharing))
