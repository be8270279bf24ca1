"""Facts issue 27's fixes rest on, read on the GPU machine (print only).

1. What an MPS client sees as its SM count, with and without
   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (does the attribute already hold the limit?).
2. Whether a cooperative launch of a CuPy RawKernel works eagerly and inside
   CUDA graph capture, and what it costs against a plain one (graph of 200 calls).
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import os, cupy
a = cupy.cuda.Device(0).attributes
print("pct", os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "sms", a["MultiProcessorCount"], flush=True)
"""

KERNEL = r"""
extern "C" __global__ void k(unsigned long long* x) { if (threadIdx.x == 0) atomicAdd(x, 1ull); }
"""


def launches() -> None:
    import cupy

    k = cupy.RawKernel(KERNEL, "k")
    x = cupy.zeros(1, dtype=cupy.uint64)
    s = cupy.cuda.Stream(non_blocking=True)
    for coop in (False, True):
        with s:
            k.kernel((132,), (512,), (x,), stream=s, enable_cooperative_groups=coop)
            s.synchronize()
            g = None
            s.begin_capture()
            for _ in range(200):
                k.kernel((132,), (512,), (x,), stream=s, enable_cooperative_groups=coop)
            g = s.end_capture()
            g.upload()
            g.launch(s)
            s.synchronize()
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            times = []
            for _ in range(10):
                a.record(s)
                g.launch(s)
                b.record(s)
                b.synchronize()
                times.append(cupy.cuda.get_elapsed_time(a, b) * 1e3 / 200)
        times.sort()
        print(
            f"cooperative={coop}: graph of 200, median {times[5]:.3f} us a launch; count {int(x.get()[0])}", flush=True
        )
    try:
        k.kernel((100000,), (512,), (x,), enable_cooperative_groups=True)
        cupy.cuda.Device().synchronize()
        print("a cooperative grid of 100000 blocks ran (unexpected)")
    except Exception as exc:  # noqa: BLE001 - what CUDA says is the fact we want
        print("a cooperative grid of 100000 blocks:", type(exc).__name__, str(exc)[:120])


def main() -> int:
    for pct in (None, "12", "50"):
        env = dict(os.environ)
        env.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", None)
        if pct:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = pct
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
        print(out.stdout.strip() or out.stderr.strip()[-300:], flush=True)
    launches()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
