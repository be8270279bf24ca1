"""A/B variants of the Atom kernel in one process: for every case and size,
each variant is built, checked bit for bit, and then all are timed side by
side (their graph replays taking turns), so the ratios carry no drift
between processes. The experiment behind the small-message kernel changes
(docs/performance.md, "Small messages").

    python3 scripts/kernel_ab.py [--set NAME] [--case CASE ...] [--variant NAME ...] [--baseline torch] [--json FILE]

With --baseline, that baseline (checked before it is timed; a row where it
cannot run or is wrong fails the run) takes its turns
with the variants, so each variant's ratio to it comes from the same replays.

Cases are datapath_survey's (``collective:dtype:sizes:strategy[:k=v,...]``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datapath_survey import SETS, parse_case  # noqa: E402

from purlin_bench.backends.cupy import CupyBackend  # noqa: E402
from purlin_bench.backends.cupy.executor import KernelSettings  # noqa: E402
from purlin_bench.backends.port import TimingPolicy  # noqa: E402
from purlin_bench.bench.run import instances  # noqa: E402
from purlin_bench.errors import ExecutionError, PurlinError  # noqa: E402
from purlin_bench.measurement import MeasurementService  # noqa: E402
from purlin_bench.spec import load_builtin  # noqa: E402

# name: the Atom datapath's experiment switches (atoms/snac.cu's small-message
# paths, the copy-only build for copy-only programs, blocks capped at the data's need)
VARIANTS = {
    "before": KernelSettings(short_reduce=False, shared_bases=False, short_batch=1, copy_only_build=False, cap_blocks=False),
    "now": KernelSettings(),
    "now-full-copies": KernelSettings(copy_only_build=False),
    "now-no-shared-bases": KernelSettings(shared_bases=False),
    "now-no-short": KernelSettings(short_reduce=False, short_batch=1),
    "now-uncapped-blocks": KernelSettings(cap_blocks=False),
    # Fan-outs (all-gather, broadcast) are almost all stores: the store hints.
    "now-st-cs": KernelSettings(st_hint=".cs"),
    "now-st-no-l1": KernelSettings(st_hint=".L1::no_allocate"),
    "now-pipelined": KernelSettings(pipeline=True),
    # Copy-only builds bound to fit 1024 threads an SM, not 512: twice the
    # blocks a group where 8 groups share the GPU (16 -> 32 on an H200).
    "now-copy-1024": KernelSettings(copy_sm_threads=1024),
    # The compiled kernel with only the bases its code names as parameters.
    "now-pruned": KernelSettings(prune_params=True),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], choices=sorted(SETS))
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--variant", action="append", default=[], choices=sorted(VARIANTS))
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--baseline", choices=("torch", "cupy"), help="a baseline timed beside the variants")
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = args.variant or list(VARIANTS)
    cases = [parse_case(c) for s in args.set for c in SETS[s]] + [parse_case(c) for c in args.case]
    # One backend per variant, on the same GPU: each prepares, checks and
    # holds its runners; the first one times them all side by side.
    services = {v: MeasurementService(CupyBackend(args.ranks, settings=VARIANTS[v])) for v in variants}
    first = services[variants[0]].backend
    policy = TimingPolicy(iters=args.iters, warmup=2, reps=args.reps)
    rows, wrong, failed = [], 0, 0
    base = [args.baseline] if args.baseline else []
    print(f"{'collective':15} {'dtype':9} {'size':>9} {'config':34} " + " ".join(f"{v:>20}" for v in variants + base), flush=True)
    for name, dtype, sizes, config in cases:
        for size, inst in instances(load_builtin(name), sizes, args.ranks, dtype, 0):
            prepared, refused = [], None
            for v in variants:
                try:
                    prepared.append(services[v].prepare(inst, config, dtype))
                except ExecutionError as e:  # e.g. more blocks than fit at once: no row to compare
                    refused = f"{v}: {e}"
                    break
            if refused:
                print(f"{name:15} {dtype:9} {size:>9} {config.text():34} refused, {refused}", flush=True)
                continue
            bad = sum(p.nwrong for p in prepared)
            wrong += bad
            try:
                extra = [prepared[0].reference.baseline(b) for b in base]
            except PurlinError as e:  # unavailable here, or its outputs were wrong: the run fails
                print(f"{name:15} {dtype:9} {size:>9} {config.text():34} no {args.baseline}: {e}", flush=True)
                failed += 1
                continue
            times = first.time([p.runner.candidate() for p in prepared] + extra, policy)
            us = {v: t.median_us for v, t in zip(variants + base, times)}
            print(f"{name:15} {dtype:9} {size:>9} {config.text():34} " + " ".join(f"{us[v]:8.2f} ({us[variants[0]] / us[v]:5.3f}x)" for v in variants + base) + (f"  WRONG {bad}" if bad else ""), flush=True)
            rows.append({"collective": name, "dtype": dtype, "size": size, "config": config.to_dict(), "time_us": us})
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
    for v in variants if rows else ():
        ratios = [r["time_us"][variants[0]] / r["time_us"][v] for r in rows]
        print(f"# {v}: geomean {statistics.geometric_mean(ratios):.3f}x vs {variants[0]} over {len(ratios)} rows (min {min(ratios):.3f}x, max {max(ratios):.3f}x)")
        for b in base:  # how much faster than the baseline each variant is (>1: faster)
            vs = [r["time_us"][b] / r["time_us"][v] for r in rows]
            print(f"# {v}: geomean {statistics.geometric_mean(vs):.3f}x over {b} (min {min(vs):.3f}x, max {max(vs):.3f}x)")
    print(f"# wrong elements: {wrong}" + (f"; {failed} rows without {args.baseline}" if failed else ""))
    return 1 if wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())
