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


def capacity(runner, device: int) -> int:
    """How many blocks of ``runner``'s kernel its process may have on
    ``device`` at once: the occupancy bound over the SMs it sees (an MPS
    client's share), divided among the processes whose ranks share the GPU.
    Waiting blocks spin, so a launch past that could wait forever on a
    block, its own or another rank's, that never gets an SM: refuse it."""
    import cupy

    kernels = [launch.kernel for launch in getattr(runner, "launches", ()) if launch.device == device]
    if kernels:
        regs = max(k.attributes["num_regs"] for k in kernels)
    else:  # before any launch exists: what this kind of kernel may take
        regs = runner.kind.registers(runner, device)
    dev = cupy.cuda.Device(device).attributes
    return resident_share(dev["MultiProcessorCount"], blocks_per_sm(dev, regs, runner.threads), runner.world.sharing)


def check_coresidency(runner) -> None:
    """Refuse ``runner``'s launches where they could not all be resident at once."""
    from purlin_bench.base.errors import ExecutionError

    per_device: dict[int, int] = {}
    for launch in runner.launches:
        per_device[launch.device] = per_device.get(launch.device, 0) + launch.grid
        if launch.cooperative:
            # CUDA's own bound for a cooperative grid: past it CuPy would
            # shrink the grid with a warning, and a group would count fewer
            # blocks than its waiters expect.
            import cupy

            with cupy.cuda.Device(launch.device):
                fn = launch.kernel.kernel
                most = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, runner.threads, 0)
                most *= cupy.cuda.Device(launch.device).attributes["MultiProcessorCount"]
            if launch.grid > most:
                raise ExecutionError(
                    f"a cooperative launch of {launch.grid} blocks on GPU {launch.device}: CUDA holds at most {most}"
                    " at once; use fewer blocks or channels"
                )
    for device, grid in per_device.items():
        cap = runner._capacity(device)
        if grid > cap:
            shared = f", {runner.world.sharing} processes sharing the GPU" if runner.world.sharing > 1 else ""
            raise ExecutionError(
                f"launch of {grid} blocks on GPU {device} could deadlock: at most {cap} fit at once "
                f"(blocks={runner.blocks}, threads={runner.threads}{shared}); use fewer blocks or channels"
            )
