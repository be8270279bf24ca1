"""A/B variants of the Atom kernel in one process: for every case and size,
each variant is built, checked bit for bit, and then all are timed side by
side (their graph replays taking turns), so the ratios carry no drift
between processes. The experiment behind the small-message kernel changes
(docs/performance.md, "Small messages").

    python3 scripts/kernel_ab.py [--set NAME] [--case CASE ...] [--variant NAME ...] [--json FILE]

Cases are datapath_survey's (``collective:dtype:sizes:strategy[:k=v,...]``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datapath_survey import SETS, add_compile_options, parse_case  # noqa: E402

from purlin_bench.bench.gpu_check import expected_outputs, run_and_count_wrong  # noqa: E402
from purlin_bench.bench.inputs import exact_inputs  # noqa: E402
from purlin_bench.bench.measure import _sets_for  # noqa: E402
from purlin_bench.bench.run import instances  # noqa: E402
from purlin_bench.dtypes import resolve_dtype  # noqa: E402
from purlin_bench.errors import ExecutionError  # noqa: E402
from purlin_bench.executors import cupy_exec, get_executor  # noqa: E402
from purlin_bench.executors.cupy_timing import time_side_by_side  # noqa: E402
from purlin_bench.planner import plan  # noqa: E402
from purlin_bench.spec import load_builtin  # noqa: E402

# name: (extra nvrtc defines, whether copy-only programs get the copy-only build,
#        whether a group's blocks are capped at what its data can use)
VARIANTS = {
    "before": (("-DPURLIN_SHORT_REDUCE=0", "-DPURLIN_SHARED_BASES=0", "-DSHORT_BATCH=1"), False, False),
    "now": ((), True, True),
    "now-full-copies": ((), False, True),
    "now-no-shared-bases": (("-DPURLIN_SHARED_BASES=0",), True, True),
    "now-no-short": (("-DPURLIN_SHORT_REDUCE=0", "-DSHORT_BATCH=1"), True, True),
    "now-uncapped-blocks": ((), True, False),
}
_plain_copies_only = cupy_exec.copies_only
_plain_useful_blocks = cupy_exec.useful_blocks


def use_variant(name: str) -> None:
    defines, copy_only, capped = VARIANTS[name]
    add_compile_options(*defines)
    cupy_exec.copies_only = _plain_copies_only if copy_only else (lambda lowered: False)
    cupy_exec.useful_blocks = _plain_useful_blocks if capped else (lambda lowered, itemsize, threads: cupy_exec._MAX_BLOCKS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], choices=sorted(SETS))
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--variant", action="append", default=[], choices=sorted(VARIANTS))
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = args.variant or list(VARIANTS)
    cases = [parse_case(c) for s in args.set for c in SETS[s]] + [parse_case(c) for c in args.case]
    executor = get_executor("cupy")
    rows, wrong = [], 0
    print(f"{'collective':15} {'dtype':9} {'size':>9} {'config':34} " + " ".join(f"{v:>20}" for v in variants), flush=True)
    for name, dtype, sizes, config in cases:
        _, np_dtype = resolve_dtype(dtype)
        for size, inst in instances(load_builtin(name), sizes, args.ranks, dtype, 0):
            program = plan(inst, config.strategy, dtype, None, dict(config.plan_params))
            sets = _sets_for(program)
            inputs = exact_inputs(program.in_counts, np_dtype, program.redop)
            runners, expected, refused = [], None, None
            for v in variants:
                use_variant(v)
                try:
                    runner = executor.prepare(program, sets=sets, **dict(config.exec_params))
                except ExecutionError as e:  # e.g. more blocks than fit at once: no row to compare
                    refused = f"{v}: {e}"
                    break
                if expected is None:
                    _, expected = expected_outputs(runner, inst, program, inputs)
                for slot in range(sets):
                    runner.write_inputs(inputs, slot)
                bad = run_and_count_wrong(runner, expected)
                wrong += bad
                runners.append(runner)
            if refused:
                print(f"{name:15} {dtype:9} {size:>9} {config.text():34} refused, {refused}", flush=True)
                continue
            times = time_side_by_side([r.candidate() for r in runners], runners[0].world.devices[0], args.iters, 2, args.reps, graph=True)
            us = {v: t.median_us for v, t in zip(variants, times)}
            print(f"{name:15} {dtype:9} {size:>9} {config.text():34} " + " ".join(f"{us[v]:8.2f} ({us[variants[0]] / us[v]:5.3f}x)" for v in variants) + (f"  WRONG {bad}" if bad else ""), flush=True)
            rows.append({"collective": name, "dtype": dtype, "size": size, "config": config.to_dict(), "time_us": us})
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
    for v in variants:
        ratios = [r["time_us"][variants[0]] / r["time_us"][v] for r in rows]
        print(f"# {v}: geomean {statistics.geometric_mean(ratios):.3f}x vs {variants[0]} over {len(ratios)} rows (min {min(ratios):.3f}x, max {max(ratios):.3f}x)")
    print(f"# wrong elements: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
