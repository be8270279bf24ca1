# Why the tuner and bench disagree: one buffer set (tuner) vs rotating sets (bench).
from purlin_bench.tools.bench.gpu_check import expected_outputs, run_and_count_wrong
from purlin_bench.tools.bench.inputs import exact_inputs
from purlin_bench.tools.bench.run import instances
from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.executors import get_executor
from purlin_bench.executors.cupy_timing import time_side_by_side
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import load_builtin
from purlin_bench.strategies.default import default_config

ex = get_executor("cupy")
spec = load_builtin("all-reduce")
plan_cfg = RunConfig.make("direct", {"channels": 4, "slice_bytes": 1 << 20}, {"blocks": 32, "threads": 256, "datapath": "sm", "unroll": 2})
for dtype in ("bfloat16", "float32"):
    for size, inst in instances(spec, [16, 256, 4096], 8, dtype, 0):
        _, npd = resolve_dtype(dtype)
        cands, names = [], []
        for cname, cfg in (("plan", plan_cfg), ("default", default_config(inst, "cupy", True))):
            prog = derive_program(inst, cfg.strategy, dtype, None, dict(cfg.plan_params))
            inputs = exact_inputs(prog.in_counts, npd, prog.redop)
            for sets in (1, 8):
                r = ex.prepare(prog, sets=sets, **dict(cfg.exec_params))
                _, expected = expected_outputs(r, inst, prog, inputs)
                for s in range(sets):
                    r.write_inputs(inputs, s)
                assert run_and_count_wrong(r, expected) == 0
                cands.append(r); names.append(f"{cname}/sets={sets}")
        ts = time_side_by_side([r.candidate() for r in cands], 0, 20, 2, 9, True)
        print(dtype, size, "  ".join(f"{n} {t.median_us:.2f}" for n, t in zip(names, ts)), flush=True)
