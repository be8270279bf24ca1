"""What a benchmark ran on: printed with every table, stored with every result."""

from __future__ import annotations

import platform
from typing import Any

import numpy as np

import purlin_bench


def environment(backend: str, devices: tuple[int, ...] = (0,)) -> dict[str, Any]:
    env: dict[str, Any] = {
        "purlin_bench": purlin_bench.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "backend": backend,
        "host": platform.node(),
    }
    if backend != "cupy":
        env["cpu"] = platform.processor() or platform.machine()
        return env
    import cupy

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
        import subprocess

        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
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
