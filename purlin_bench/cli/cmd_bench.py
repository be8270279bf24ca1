"""`purlin bench`: nccl-tests-compatible benchmarks with baselines and a floor."""

from __future__ import annotations

from typing import Optional

import typer

from purlin_bench.bench.env import environment
from purlin_bench.bench.measure import DEFAULT, BenchOptions, GpuMeasurer, NumpyMeasurer
from purlin_bench.bench.report import summary, table, write_csv, write_json
from purlin_bench.bench.run import Choice, configs_for, instances
from purlin_bench.bench.sizes import sweep
from purlin_bench.cli import common
from purlin_bench.dtypes import REDOPS, resolve_dtype
from purlin_bench.errors import PurlinError
from purlin_bench.executors import get_executor
from purlin_bench.hardware import one_gpu
from purlin_bench.session import resolve_backend
from purlin_bench.sizes import parse_bytes
from purlin_bench.spec.loader import load_all_builtin, resolve

ORDER = 40
# Without a GPU the reference executor runs in NumPy: keep its default sweep short.
_NUMPY_DEFAULT_MAX = "1M"


def bench(
    collective: str = typer.Argument(..., help="collective name, a spec .yaml, or 'all'"),
    minbytes: str = typer.Option("8", "-b", "--minbytes", help="smallest message size S (nccl-tests convention)"),
    maxbytes: Optional[str] = typer.Option(None, "-e", "--maxbytes", help="largest message size [default: 256M on a GPU, 1M on numpy]"),
    stepfactor: int = typer.Option(2, "-f", "--stepfactor", help="multiply the size by this each step"),
    iters: int = typer.Option(20, "-n", "--iters", help="calls per timed batch (one CUDA graph)"),
    warmup: int = typer.Option(5, "-w", "--warmup_iters", help="untimed batches first"),
    datatype: str = typer.Option("float32", "-d", "--datatype", help="float32|float16|bfloat16|int32|float64 (nccl-tests names too)"),
    op: str = typer.Option("sum", "-o", "--op", help="reduction: sum|prod|max|min"),
    root: int = typer.Option(0, "-r", "--root", help="root rank of rooted collectives"),
    check: int = typer.Option(1, "-c", "--check", help="1: count wrong elements against the reference"),
    cudagraph: int = typer.Option(5, "-G", "--cudagraph", help="replay each captured batch this many times (median); 0: eager launches"),
    ranks: int = typer.Option(8, "--ranks", help="virtual ranks on one GPU"),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="one rank per GPU: '0,1,2,3' or 'all'"),
    strategy: str = typer.Option("auto", "--strategy", help="a strategy, 'auto' (untuned default) or 'all'"),
    plan: Optional[str] = typer.Option(None, "--plan", help="a tuned plan file, or 'auto' to find one for this GPU"),
    baseline: str = typer.Option("auto", "--baseline", help="comma list: cupy (virtual ranks), nccl (--gpus), default (the untuned --strategy auto, to rate a --plan), none; auto picks cupy or nccl by layout"),
    inplace: bool = typer.Option(True, "--inplace/--no-inplace", help="also measure in place"),
    backend: str = typer.Option("auto", "--backend", help="auto|cupy|numpy"),
    channels: Optional[int] = typer.Option(None, "--channels", help="override: channels per rank"),
    slice_bytes: Optional[str] = typer.Option(None, "--slice-bytes", help="override: bytes per slice, e.g. 4K or 1M"),
    blocks: Optional[int] = typer.Option(None, "--blocks", help="override: thread blocks per channel (cupy)"),
    threads: Optional[int] = typer.Option(None, "--threads", help="override: threads per block (cupy)"),
    datapath: Optional[str] = typer.Option(None, "--datapath", help="override: sm|ce (cupy)"),
    unroll: Optional[int] = typer.Option(None, "--unroll", help="override: 16-byte vectors per source a thread has in flight, 1|2|4 (cupy)"),
    json_out: Optional[str] = typer.Option(None, "--json", help="write results (nccl-tests -J rows plus ours) here"),
    csv_out: Optional[str] = typer.Option(None, "--csv", help="write one CSV row per size here"),
    plot_out: Optional[str] = typer.Option(None, "--plot", help="write a bandwidth/latency plot (PNG) here"),
) -> None:
    """Measure collectives like nccl-tests: time, algbw, busbw, #wrong, in and out of place."""
    dtype, _ = resolve_dtype(datatype)
    if op not in REDOPS:
        raise PurlinError(f"unknown reduction '{op}' (known: {', '.join(REDOPS)})")
    backend_name, why = resolve_backend(backend)
    devices = common.gpu_devices(gpus, backend_name)
    n_ranks = len(devices) if devices else ranks
    if n_ranks < 1:
        raise PurlinError(f"--ranks must be at least 1, got {n_ranks}")
    sizes = sweep(parse_bytes(minbytes, "--minbytes"), parse_bytes(maxbytes or ("256M" if backend_name == "cupy" else _NUMPY_DEFAULT_MAX), "--maxbytes"), stepfactor)
    if iters < 1 or warmup < 0 or cudagraph < 0:
        raise PurlinError("--iters must be >= 1, --warmup_iters and --cudagraph >= 0")
    names = common.name_list(baseline)
    names = [n for b in names for n in ((["nccl"] if devices else ["cupy"]) if b == "auto" else [b])]
    baselines = tuple(dict.fromkeys(b for b in names if b != "none"))
    for b in baselines:
        if b not in ("cupy", "nccl", DEFAULT):
            raise PurlinError(f"unknown baseline '{b}' (known: auto, cupy, nccl, default, none)")
    specs = load_all_builtin() if collective == "all" else [resolve(collective)]
    slice_nbytes = None if slice_bytes is None else parse_bytes(slice_bytes, "--slice-bytes")
    choice = _choice(strategy, plan, channels, slice_nbytes, {"blocks": blocks, "threads": threads, "datapath": datapath, "unroll": unroll}, backend_name, n_ranks, dtype)
    options = BenchOptions(iters=iters, warmup=warmup, reps=max(1, cudagraph or 5), graph=cudagraph > 0, check=bool(check), inplace=inplace, baselines=baselines if backend_name == "cupy" else ("numpy", *(b for b in baselines if b == DEFAULT)))
    if backend_name == "cupy":
        from purlin_bench.bench.roofline import measure_copy_bandwidth

        executor = get_executor("cupy", devices=tuple(devices) if devices else None)
        bandwidth = measure_copy_bandwidth(tuple(devices) if devices else (0,))
        measurer = GpuMeasurer(executor, options, bandwidth)
        where = executor.describe(n_ranks)
    else:
        bandwidth = None
        measurer = NumpyMeasurer(get_executor("numpy"), options)
        where = f"numpy CPU reference, {n_ranks} simulated ranks"
    if why:  # only now: bad input above gets its one error line and nothing else
        common.note(f"{why}. Times below are CPU times of the reference executor, not GPU times.")
    env = environment(backend_name, tuple(devices) if devices else (0,))
    timing = ("CUDA graphs" if options.graph else "eager launches") if backend_name == "cupy" else "CPU wall clock"
    common.console.print(f"# purlin bench on {where}; {timing}, {iters} calls per batch, median of {options.reps}", highlight=False)
    if bandwidth is not None:
        # The floor's yardstick, measured in this run: recorded so "% floor" can be re-derived.
        env["copy_bandwidth_gbps"] = round(bandwidth.bytes_per_s / 1e9, 1)
        env["copy_bandwidth_kind"] = bandwidth.kind
        common.console.print(f"# floor: {bandwidth.kind} copy bandwidth {bandwidth.bytes_per_s / 1e9:.0f} GB/s (cudaMemcpyAsync, this run)", highlight=False)
    command = common.command_line()
    plan_text = [(spec, instances(spec, sizes, n_ranks, dtype, root)) for spec in specs]
    total = sum(len(items) for _, items in plan_text)
    records = []
    with common.progress_bar() as progress:
        task = progress.add_task("bench", total=total)
        for spec, items in plan_text:
            spec_records = []
            for size, inst in items:
                progress.update(task, description=f"{spec.name} {size} B")
                for config in configs_for(inst, size, choice, backend_name, fused=one_gpu(devices)):
                    spec_records.append(measurer.measure(inst, config, dtype, op if spec.op == "reduce" else None))
                progress.advance(task)
            records.extend(spec_records)
            common.console.print(table(spec_records, f"{spec.name}  ({n_ranks} ranks, {dtype}{', root ' + str(root) if spec.rooted else ''})"))
            if json_out:  # rewritten (atomically) after every collective: an interrupted sweep keeps what it measured
                write_json(json_out, records, env, command)
    for line in summary(records):
        common.console.print(line, highlight=False)
    failed = any(r.out_of_place.nwrong or (r.in_place and r.in_place.nwrong) for r in records)
    if csv_out:
        write_csv(csv_out, records)
    if plot_out:
        from purlin_bench.bench.plot import plot_rows
        from purlin_bench.bench.report import json_row

        plot_rows([json_row(r) for r in records], plot_out, f"{', '.join(s.name for s in specs)} on {where}")
    if failed:
        raise PurlinError("some outputs were wrong (see #wrong)")


def _choice(strategy, plan, channels, slice_bytes, exec_options: dict, backend, ranks, dtype) -> Choice:
    plan_overrides = {k: v for k, v in (("channels", channels), ("slice_bytes", slice_bytes)) if v is not None}
    exec_overrides = {k: v for k, v in exec_options.items() if v is not None}
    if exec_overrides and backend != "cupy":
        raise PurlinError("--blocks/--threads/--datapath/--unroll apply to the cupy backend only")
    if plan is None:
        return Choice(strategy, plan_overrides, exec_overrides)
    from purlin_bench.plans import plan_lookup

    return Choice(strategy, plan_overrides, exec_overrides, plan_lookup(plan, backend=backend, ranks=ranks, dtype=dtype))


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
