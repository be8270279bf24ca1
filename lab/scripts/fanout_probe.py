"""Why the fan-outs stop short of the floor: the rates of device memory for
a copy (half reads, half writes), for writes alone and for a 1-to-R
broadcast write, measured in one process on one GPU.

The floor (purlin_bench.spec.roofline) divides the bytes a collective must read
and write by the rate of a large cudaMemcpyAsync, which moves as many bytes
each way. An all-gather or broadcast over R ranks reads each byte once and
writes it R times: if writes alone run slower than a copy's mix, that floor
is out of reach for them, and this says by how much.

    python3 lab/scripts/fanout_probe.py [--gib 1] [--ranks 8] [--reps 10]

Prints each rate and the share of the copy floor that a fan-out bound by
them could reach: with a copy's rate c (bytes read plus written per second)
and the write rate w, reads alone run at r, where 2/c = 1/r + 1/w; a
fan-out's best time for S bytes is S/r + R*S/w, against the floor's
(1 + R)*S/c.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from purlin_bench.spec.roofline import fanout_share, read_seconds_per_byte


def timed(run, stream, reps: int) -> float:
    """Median seconds of ``run()`` on ``stream`` over ``reps`` (after two untimed)."""
    import cupy

    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    samples = []
    for i in range(reps + 2):
        begin.record(stream)
        run()
        end.record(stream)
        end.synchronize()
        if i >= 2:
            samples.append(cupy.cuda.get_elapsed_time(begin, end) / 1e3)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0, help="bytes a copy or a write moves, in GiB")
    ap.add_argument("--ranks", type=int, default=8, help="consumers of the 1-to-R write")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    import cupy

    nbytes = int(args.gib * (1 << 30)) // 16 * 16
    R = args.ranks
    src = cupy.ones(nbytes, dtype=cupy.uint8)
    dst = cupy.empty(nbytes, dtype=cupy.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    rt = cupy.cuda.runtime
    with stream:
        copy_s = timed(lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, rt.memcpyDefault, stream.ptr), stream, args.reps)
        write_s = timed(lambda: rt.memsetAsync(dst.data.ptr, 0, nbytes, stream.ptr), stream, args.reps)
        # The shortest code for a 1-to-R fan-out: one broadcasting copy of
        # S/R bytes into R rows (S bytes written, S/R read).
        part = nbytes // R // 16 * 16
        rows = dst[: part * R].view(cupy.uint32).reshape(R, part // 4)
        one = src[:part].view(cupy.uint32)
        fan_s = timed(lambda: rows.__setitem__(slice(None), one[None, :]), stream, args.reps)
    c = 2 * nbytes / copy_s
    w = nbytes / write_s
    read_s = read_seconds_per_byte(c, w)
    r = 1 / read_s if read_s else float("inf")
    fan_rate = (part + part * R) / fan_s
    best = fanout_share(c, w, R)
    name = rt.getDeviceProperties(0)["name"]
    print(f"# {name.decode() if isinstance(name, bytes) else name}; {nbytes / (1 << 30):.2f} GiB, median of {args.reps}")
    print(f"copy (cudaMemcpyAsync, read + written)  {c / 1e9:8.0f} GB/s")
    print(f"write alone (cudaMemsetAsync)           {w / 1e9:8.0f} GB/s   ({w / c:.3f} of the copy's rate)")
    print(f"read alone, implied by the two          {r / 1e9:8.0f} GB/s")
    print(f"1-to-{R} broadcast copy (CuPy)            {fan_rate / 1e9:8.0f} GB/s   ({fan_rate / c:.3f} of the copy's rate)")
    print(f"# a 1-to-{R} fan-out bound by these rates reaches {best:.3f} of the copy floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
