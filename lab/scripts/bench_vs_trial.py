"""Does a tune trial time a configuration as `purlin bench` does? For each
case, in one process: a bench row (bench.measure.Measurer, the
configuration timed beside the default and the CuPy baseline) and a tune
trial (tune.measure.ServiceBench.measure at that size, the configuration
alone), taking turns over several rounds; the medians and their ratio.

    python3 lab/scripts/bench_vs_trial.py [--rounds 5] [--case CASE ...] [--json FILE]

CASE is datapath_survey's ``collective:dtype:sizes:strategy[:k=v,...]``, or
``collective:dtype:sizes:auto`` for the untuned default.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datapath_survey import parse_case  # noqa: E402

from purlin_bench.backends import open_backend  # noqa: E402
from purlin_bench.backends.port import TimingPolicy  # noqa: E402
from purlin_bench.tools.bench.measure import BenchOptions, Measurer  # noqa: E402
from purlin_bench.tools.bench.run import instances  # noqa: E402
from purlin_bench.measure.service import MeasurementService  # noqa: E402
from purlin_bench.spec import load_builtin  # noqa: E402
from purlin_bench.tools.tune.measure import ServiceBench  # noqa: E402
from purlin_bench.tools.tune.sweep import Bucket  # noqa: E402

CASES = [
    "all-reduce:float32:16,64K,1M,16M,256M:auto",
    "all-reduce:bfloat16:4K,1M,64M:auto",
    "all-reduce:float32:64K,4M:ring:channels=2,blocks=8",
    "all-gather:float32:16,64K,16M:auto",
    "all-gather:bfloat16:1M,256M:auto",
    "reduce-scatter:float32:4K,1M,64M:auto",
    "all-to-all:float32:64K,16M,256M:auto",
    "broadcast:bfloat16:4K,16M:auto",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--backend", default="cupy", help="fake: try the script without a GPU")
    ap.add_argument("--json")
    args = ap.parse_args()
    service = MeasurementService(open_backend(args.backend, args.ranks))
    baselines = (*service.backend.baselines()[:1], "default")
    bench = Measurer(service, BenchOptions(TimingPolicy(iters=20, warmup=5, reps=5), inplace=False, baselines=baselines), None)
    rows = []
    print(f"{'collective':15} {'dtype':9} {'size':>10} {'config':44} {'bench us':>9} {'trial us':>9} {'trial/bench':>11} {'wrong':>5}", flush=True)
    for text in args.case or CASES:
        auto = text.endswith(":auto")
        name, dtype, sizes, config = parse_case(text[: -len("auto")] + "direct" if auto else text)
        spec = load_builtin(name)
        trial = ServiceBench(service, spec, dtype)
        for size, inst in instances(spec, sizes, args.ranks, dtype, 0):
            chosen = service.default_config(inst) if auto else config
            bucket = Bucket(size, size)
            bench_us, trial_us, wrong = [], [], 0
            for k in range(args.rounds):
                # in turns, alternating which goes first
                for which in (("bench", "trial") if k % 2 == 0 else ("trial", "bench")):
                    if which == "bench":
                        record = bench.measure(inst, chosen, dtype, None)
                        bench_us.append(record.out_of_place.time_us)
                        wrong += record.out_of_place.nwrong
                    else:
                        wrong += trial.check(chosen, bucket).wrong
                        trial_us.append(trial.measure(chosen, bucket))
            b, t = statistics.median(bench_us), statistics.median(trial_us)
            print(f"{name:15} {dtype:9} {size:>10} {chosen.text():44} {b:9.2f} {t:9.2f} {t / b:11.3f} {wrong:5}", flush=True)
            rows.append({"collective": name, "dtype": dtype, "size": size, "config": chosen.to_dict(), "bench_us": bench_us, "trial_us": trial_us, "ratio": t / b, "wrong": wrong})
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
    ratios = [r["ratio"] for r in rows]
    print(f"# trial/bench: geomean {statistics.geometric_mean(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)} rows; worst |1 - ratio| {max(abs(1 - x) for x in ratios):.3f}")
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
