"""How many blocks of a kernel one process may keep resident on its GPU.

SNAC's waits spin: a block waits on a flag that other blocks, of its own
grid or of another rank's kernel, bump. That is safe only if every block it
waits on can hold an SM at the same time as it does. One process with all
ranks in one launch needs its own grid resident (a cooperative launch checks
and guarantees that). With one process per rank, several ranks may share a
GPU (several processes on one GPU under CUDA MPS run concurrently): then the
sum of their grids must fit, so each process takes its share, and an MPS
client limited to a percentage of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)
takes its share of those. Pure arithmetic: tested without a GPU.
"""

from __future__ import annotations

import os
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


def mps_percentage(environ: Mapping[str, str] | None = None) -> float | None:
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as a number in (0, 100], if set."""
    text = (os.environ if environ is None else environ).get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None  # CUDA ignores what it cannot read; so do we
    return value if 0 < value <= 100 else None


def usable_sms(sms: int, percentage: float | None) -> int:
    """SMs an MPS client limited to ``percentage`` may use (at least one).
    Rounded down: a share counted too large is a deadlock, too small only
    fewer blocks."""
    if percentage is None:
        return sms
    return max(1, min(sms, int(sms * percentage / 100)))


def resident_share(sms: int, per_sm: int, sharing: int, percentage: float | None) -> int:
    """Blocks this process may keep resident: the GPU's ``sms * per_sm``
    split among the ``sharing`` processes whose ranks share it, and no more
    than its own SMs hold (an MPS client's limit). Which SMs each client
    gets is the MPS server's choice: this assumes it spreads them, as it
    does when the percentages add up to at most 100."""
    whole = sms * per_sm // max(1, sharing)
    return max(0, min(whole, usable_sms(sms, percentage) * per_sm))
