"""Where a small variable collective's time over torch's goes, in one harness
(session 28; gather_gap.py did this for the fixed gather): the bench row's
default (its runner), torch's baseline, and purlin's own generated kernel
launched bare with the runner's arguments of each buffer set, in variants
that each take one thing away:

- the counts' check (the grid's last thread loads every count again);
- the count loads too (each count its capacity, compiled in);
- every store of an element but its first destination;
- every block but the first (only where the first block's threads cover the call);
- the whole body (an empty kernel of the same parameters: the launch floor);

and the same call as the other small-launch codes run it (flat without early
loads, pooled: flat.py's bounds set aside) and with plain loads for
``ld.global.cg`` (the datapath's loads are strong, gpu-scoped, in SASS).

The fixed all-gather of the same bytes runs beside them (its runner and its
torch), since at 8-256 B it is no faster than torch either. Only the runners'
rows are checked (#wrong); the variants' outputs are wrong by design.

    python3 lab/scripts/variable_gap.py [--collective all-gather-v] [--bytes 8,64,256]
        [--counts skewed] [--iters 50] [--reps 15]
"""

from __future__ import annotations

import argparse
import re
import sys

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen import flat
from purlin_bench.backends.cupy.codegen.compiled import options_of, params_of
from purlin_bench.backends.cupy.runtime.timing import StreamCandidate
from purlin_bench.backends.port import TimingPolicy
from purlin_bench.base.sizes import parse_bytes
from purlin_bench.measure.service import MeasurementService, rotation_sets
from purlin_bench.spec import load_builtin
from purlin_bench.tools.bench.run import instances

RANKS = 8
CHECK = re.compile(r"  if \(blockIdx\.x == gridDim\.x - 1 && threadIdx\.x == blockDim\.x - 1\) \{\n.*?\n  \}\n", re.S)
COUNT = re.compile(r"clamp_count\(__ldg\(counts \+ \d+\), (\d+ll)\)")
DESTS = re.compile(r"char\* const dst\[\d+\] = \{([^,}]+)(?:, [^}]*)?\}")
BODY = "const i64* __restrict__ counts) {\n"


def variants(text: str) -> dict[str, str]:
    """Label -> source: the runner's own, then each taking one more thing away."""
    out = {"purlin's kernel, launched bare": text}
    if CHECK.search(text):
        out["- the counts' check"] = text = CHECK.sub("", text)
    if COUNT.search(text):
        out["- the count loads (capacities)"] = COUNT.sub(r"\1", text)
    stores = DESTS.sub(r"char* const dst[1] = {\1}", out["purlin's kernel, launched bare"])
    if stores != out["purlin's kernel, launched bare"]:
        out["one destination a store"] = stores
    if BODY not in text:
        raise SystemExit("variable_gap: the generated kernel's signature changed; update BODY")
    out["empty body (same parameters)"] = text.replace(BODY, BODY + "  return;\n", 1)
    return out


def other_codes(backend, program, exec_params: dict, text: str) -> dict[str, str]:
    """Label -> the same program's source as the other small-launch codes would run it,
    where that differs from ``text`` and takes the same parameters."""
    bounds = ("EARLY_SOURCES_MAX_BYTES", "FLAT_MAX_BYTES", "RUNS_MAX_BYTES")
    saved = {name: getattr(flat, name) for name in bounds if hasattr(flat, name)}
    out = {}
    try:
        for label, zero in (("no early loads (flat, or grouped)", ("EARLY_SOURCES_MAX_BYTES", "RUNS_MAX_BYTES")),
                            ("pooled", ("EARLY_SOURCES_MAX_BYTES", "RUNS_MAX_BYTES", "FLAT_MAX_BYTES"))):
            for name in zero:
                if name in saved:
                    setattr(flat, name, 0)
            other = backend.source(program, **exec_params)
            if other != text and other not in out.values() and params_of(other) == params_of(text):
                out[label] = other
    finally:
        for name, value in saved.items():
            setattr(flat, name, value)
    plain = text.replace("ld.global.cg.", "ld.global.")
    if plain != text:
        out["plain loads (ld.global, not .cg)"] = plain
    return out


def bare(prepared, source: str, options, grid: int) -> StreamCandidate:
    """``source``'s kernel launched with the runner's arguments of each buffer set, in turn."""
    import cupy

    runner, sets = prepared.runner, rotation_sets(prepared.program)
    launch = runner.launches[0]
    args = [launch.arguments(runner, s) for s in range(sets)]
    fn = cupy.RawModule(code=source, options=options).get_function("purlin_compiled")
    stream = cupy.cuda.Stream(non_blocking=False)

    def enqueue(target, i: int) -> None:
        fn((grid,), (runner.threads,), args[i % sets], stream=target)

    return StreamCandidate(enqueue, stream)


def row(service, backend, collective: str, size: int, distribution: str, policy: TimingPolicy) -> int:
    (got,) = instances(load_builtin(collective), [size], RANKS, "float32", 0, distribution)
    prepared = service.prepare(got.inst, service.default_config(got.inst), "float32", counts=got.counts)
    config, runner = prepared.config, prepared.runner
    (fixed,) = instances(load_builtin("all-gather"), [max(size, 32)], RANKS, "float32", 0)
    fixed_prepared = service.prepare(fixed.inst, service.default_config(fixed.inst), "float32")
    cands = {
        f"{collective} default": runner.candidate(),
        "torch": prepared.reference.baseline("torch"),
        f"all-gather default, {fixed.size} B": fixed_prepared.runner.candidate(),
        "all-gather's torch": fixed_prepared.reference.baseline("torch"),
    }
    text = backend.source(prepared.program, **dict(config.exec_params))
    if f"const int B = {runner.blocks};" not in text:
        print(f"variable_gap: the source is not for the runner's {runner.blocks} blocks a group", file=sys.stderr)
        return 1
    options = options_of(text)
    grid = runner.launches[0].grid
    codes = {**variants(text), **other_codes(backend, prepared.program, dict(config.exec_params), text)}
    for label, source in codes.items():
        cands[label] = bare(prepared, source, options, grid)
    end = re.search(r"const pool_t END = (\d+)", text)
    if end and int(end.group(1)) <= runner.threads and grid > 1:
        cands["one block (the rest of the grid idle)"] = bare(prepared, text, options, 1)
    times = backend.time(list(cands.values()), policy)
    print(f"# {collective} {size} B ({distribution}, counts {got.counts}), {RANKS} virtual ranks, float32, "
          f"grid {grid} x {runner.threads}; purlin #wrong {prepared.nwrong}, all-gather #wrong {fixed_prepared.nwrong}")
    for name, t in zip(cands, times):
        print(f"  {name:58} {t.median_us:7.2f} us")
    return 1 if prepared.nwrong or fixed_prepared.nwrong else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collective", default="all-gather-v", help="comma-separated: all-gather-v, reduce-scatter-v, ...")
    ap.add_argument("--bytes", default="8,64,256", help="comma-separated sizes S (bench's)")
    ap.add_argument("--counts", default="skewed", help="uniform, skewed or hot")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    backend = CupyBackend(RANKS)
    service = MeasurementService(backend)
    policy = TimingPolicy(iters=a.iters, warmup=2, reps=a.reps)
    bad = 0
    for collective in a.collective.split(","):
        for size in (parse_bytes(s) for s in a.bytes.split(",")):
            try:
                bad |= row(service, backend, collective, size, a.counts, policy)
            except Exception as exc:  # a lab run on a lent machine: the other rows still count
                print(f"# {collective} {size} B: {type(exc).__name__}: {exc}")
                bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
