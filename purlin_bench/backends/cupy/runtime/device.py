"""What the GPU is: its fingerprint, its versions, its copy bandwidth."""

from __future__ import annotations

import statistics
import subprocess
from typing import Any

from purlin_bench.base.errors import PurlinError
from purlin_bench.base.hardware import Fingerprint, cpu_model, gpu_type_slug, layout_slug, procs_layout_slug
from purlin_bench.spec.roofline import Bandwidth


def _cuda_version(value: int) -> str:
    """CUDA encodes versions as 1000 * major + 10 * minor (13000 -> '13.0')."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def _text(value: Any) -> str:
    return value.decode(errors="replace").rstrip("\0") if isinstance(value, (bytes, bytearray)) else str(value)


def fingerprint(ranks: int, gpus: tuple[int, ...] | None, procs: tuple[int, int] | None = None) -> Fingerprint:
    """This machine's fingerprint for ``ranks`` virtual ranks, or one rank per
    GPU of ``gpus``; with ``procs`` (processes, GPUs) one process per rank, this
    process's GPU in ``gpus``."""
    try:
        import cupy  # here: machines that only read plans never need it
    except ImportError:
        raise PurlinError("the cupy backend needs CuPy (in a checkout: pip install -e '.[cuda13]')") from None

    runtime = cupy.cuda.runtime
    devices = gpus or (0,)
    try:
        props = runtime.getDeviceProperties(devices[0])
        driver = _cuda_version(int(runtime.driverGetVersion()))
        runtime_version = _cuda_version(int(runtime.runtimeGetVersion()))
        peer = all(runtime.deviceCanAccessPeer(a, b) for a in devices for b in devices if a != b)
    except Exception as exc:  # CuPy raises its own CUDARuntimeError types
        raise PurlinError(f"cannot read the GPU's properties ({type(exc).__name__}: {exc})") from None
    name = _text(props.get("name", "unknown GPU"))
    layout = None
    if procs is not None:
        n_procs, n_gpus = procs
        layout = procs_layout_slug(n_procs, n_gpus)
        link = f"one process per rank: {n_procs} processes on {n_gpus} GPU{'s' if n_gpus > 1 else ''} (CUDA IPC)"
    elif gpus and len(gpus) > 1:
        link = f"one rank per GPU on {len(gpus)} GPUs ({'peer access' if peer else 'no peer access'})"
    else:
        link = f"{ranks} virtual ranks on GPU {devices[0]}"
    if procs is None:
        ranks = len(devices) if gpus else ranks
        layout = layout_slug(ranks, len(gpus) if gpus else 1, peer)
    return Fingerprint(
        backend="cupy",
        gpu_type=gpu_type_slug(name),
        layout=layout,
        ranks=ranks,
        link=link,
        device_name=name,
        devices=tuple(devices),
        compute_capability=f"{props.get('major')}.{props.get('minor')}",
        sm_count=int(props["multiProcessorCount"]) if "multiProcessorCount" in props else None,
        memory_bytes=int(props["totalGlobalMem"]) if "totalGlobalMem" in props else None,
        driver_version=driver,
        cuda_runtime_version=runtime_version,
        cpu_model=cpu_model(),
    )


def environment(devices: tuple[int, ...]) -> dict[str, Any]:
    """GPU, driver, CUDA, CuPy and NCCL versions, stored with every result."""
    import cupy

    env: dict[str, Any] = {}
    props = cupy.cuda.runtime.getDeviceProperties(devices[0])
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    driver = cupy.cuda.runtime.driverGetVersion()
    runtime = cupy.cuda.runtime.runtimeGetVersion()
    env.update(
        gpu=name,
        gpus=len(set(devices)),
        sms=int(props["multiProcessorCount"]),
        compute_capability=f"{props['major']}.{props['minor']}",
        cuda_driver=f"{driver // 1000}.{driver % 1000 // 10}",
        cuda_runtime=f"{runtime // 1000}.{runtime % 1000 // 10}",
        cupy=cupy.__version__,
    )
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if smi.returncode == 0:
            env["driver"] = smi.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from cupy.cuda import nccl

        v = nccl.get_version()
        env["nccl"] = f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    except Exception:  # NCCL is optional in CuPy builds
        pass
    return env


def measure_copy_bandwidth(devices: tuple[int, ...], nbytes: int = 1 << 30, reps: int = 10) -> Bandwidth:
    """Device-to-device copy on one GPU, or GPU0 -> GPU1 peer copy across two."""
    import cupy

    local = len(set(devices)) == 1
    src_dev, dst_dev = devices[0], devices[0] if local else next(d for d in devices if d != devices[0])
    with cupy.cuda.Device(src_dev):
        src = cupy.ones(nbytes, dtype=cupy.uint8)
    with cupy.cuda.Device(dst_dev):
        dst = cupy.empty(nbytes, dtype=cupy.uint8)
    with cupy.cuda.Device(src_dev):
        stream = cupy.cuda.Stream(non_blocking=True)
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        samples = []
        for i in range(reps + 2):
            begin.record(stream)
            cupy.cuda.runtime.memcpyAsync(
                dst.data.ptr, src.data.ptr, nbytes, cupy.cuda.runtime.memcpyDefault, stream.ptr
            )
            end.record(stream)
            end.synchronize()
            if i >= 2:  # the first copies warm up
                samples.append(cupy.cuda.get_elapsed_time(begin, end) / 1e3)
    seconds = statistics.median(samples)
    del src, dst
    return Bandwidth(2 * nbytes / seconds if local else nbytes / seconds, "local" if local else "peer")
