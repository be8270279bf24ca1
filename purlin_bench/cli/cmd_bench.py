"""`purlin bench`: nccl-tests-compatible benchmarks with baselines and a floor."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape

from purlin_bench.backends import AUTO, REFERENCE, make, names, resolve as resolve_backend
from purlin_bench.backends.port import TimingPolicy, refuses_sizes_per_call
from purlin_bench.cli.procs import MPS_HELP, PROCS_HELP, check_mps, check_procs, launch, ranks_for
from purlin_bench.tools.bench.measure import DEFAULT, BenchOptions, Measurer
from purlin_bench.tools.bench import nccl_log
from purlin_bench.tools.bench.report import TableLayout, summary, write_csv, write_json
from purlin_bench.tools.bench.run import Choice, configs_for, instances
from purlin_bench.tools.bench.sizes import sweep
from purlin_bench.cli import common, limits, outputs
from purlin_bench.cli.targets import many_specs
from purlin_bench.base.dtypes import REDOPS, resolve_dtype
from purlin_bench.base.errors import CapacityError, PurlinError
from purlin_bench.measure.service import MeasurementService
from purlin_bench.base.sizes import counted, parse_bytes
from purlin_bench.strategies import get_strategy
from purlin_bench.base.textfile import is_stream
from purlin_bench.spec.variable import distribution_option

ORDER = 40
# Said wherever a run prints the reference backend's baseline: its name is
# the backend's, and a newcomer reads it as a collective library.
REFERENCE_BASELINE = (f"baseline {REFERENCE}: the expected outputs computed directly with NumPy, no program and "
                      "no ranks: a yardstick for the CPU executor's times, not a collective library")
TABLE, NCCL_TESTS = "table", "nccl-tests"
FORMATS = (AUTO, TABLE, NCCL_TESTS)


def _param_help(name: str) -> str:
    return "override: " + common.param_help(name)


def bench(
    collective: Optional[str] = typer.Argument(None, help="collective name, a spec .yaml, or 'all' (or --spec)"),
    spec_files: Optional[list[str]] = typer.Option(None, "--spec", help="a user's collective spec (.yaml); repeatable"),
    minbytes: str = typer.Option("8", "-b", "--minbytes", help="smallest message size S (nccl-tests convention)"),
    maxbytes: Optional[str] = typer.Option(None, "-e", "--maxbytes",
                                           help="largest message size [default: the backend's, 256M on a GPU, 1M on "
                                                "the CPU reference]"),
    stepfactor: int = typer.Option(2, "-f", "--stepfactor", help="multiply the size by this each step"),
    iters: int = typer.Option(20, "-n", "--iters", help="calls per timed batch (one CUDA graph)"),
    warmup: int = typer.Option(5, "-w", "--warmup_iters", help="untimed batches first"),
    datatype: str = typer.Option("float32", "-d", "--datatype", "--dtype",
                                 help="float32|float16|bfloat16|int32|float64|float8_e4m3fn|float8_e5m2 "
                                      "(nccl-tests names too)"),
    op: str = typer.Option("sum", "-o", "--op", help="reduction: sum|prod|max|min"),
    root: int = typer.Option(0, "-r", "--root", help="root rank of rooted collectives"),
    counts: Optional[str] = typer.Option(None, "--counts",
                                         help="Sizes per call (all-to-all-v, ...): how a row's counts are drawn, "
                                         "adding up to its size: uniform (the default), skewed (Zipf over ranks, as "
                                         "MoE routing), hot (one rank takes all), sparse."),
    check: int = typer.Option(1, "-c", "--check", help="1: count wrong elements against the reference"),
    cudagraph: int = typer.Option(5, "-G", "--cudagraph",
                                  help="replay each captured batch this many times (median); 0: eager launches"),
    ranks: Optional[int] = typer.Option(None, "--ranks",
                                        help="virtual ranks on one GPU [default: 8; with --procs the run's]"),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="one rank per GPU: '0,1,2,3' or 'all'"),
    strategy: str = typer.Option("auto", "--strategy", help="a strategy, 'auto' (untuned default) or 'all'"),
    plan: Optional[str] = typer.Option(None, "--plan", help="a tuned plan file, or 'auto' to find one for this GPU"),
    baseline: str = typer.Option("auto", "--baseline",
                                 help="comma list: the backend's baselines (on a GPU: cupy on virtual ranks, nccl with "
                                      "--gpus), default (the untuned --strategy auto, to rate a --plan), none; auto: "
                                      "the backend's strongest"),
    inplace: bool = typer.Option(True, "--inplace/--no-inplace", help="also measure in place"),
    backend: str = typer.Option(AUTO, "--backend", help=" | ".join((AUTO, *names()))),
    channels: Optional[int] = typer.Option(None, "--channels", help="override: channels per rank"),
    slice_bytes: Optional[str] = typer.Option(None, "--slice-bytes", help="override: bytes per slice, e.g. 4K or 1M"),
    blocks: Optional[int] = typer.Option(None, "--blocks", help=_param_help("blocks")),
    threads: Optional[int] = typer.Option(None, "--threads", help=_param_help("threads")),
    datapath: Optional[str] = typer.Option(None, "--datapath", help=_param_help("datapath")),
    kernel: Optional[str] = typer.Option(None, "--kernel", help=_param_help("kernel")),
    unroll: Optional[int] = typer.Option(None, "--unroll", help=_param_help("unroll")),
    json_out: Optional[str] = typer.Option(None, "--json", help="write results (nccl-tests -J rows plus ours) here"),
    csv_out: Optional[str] = typer.Option(None, "--csv", help="write one CSV row per size here"),
    plot_out: Optional[str] = typer.Option(None, "--plot", help="write a bandwidth/latency plot (PNG) here"),
    fmt: str = typer.Option(AUTO, "--format",
                            help=f"stdout layout: {' | '.join(FORMATS)}; auto: table on a terminal, nccl-tests' text "
                                 f"otherwise (logs its readers parse)"),
    procs: Optional[str] = typer.Option(None, "--procs", help=PROCS_HELP),
    mps: bool = typer.Option(False, "--mps", help=MPS_HELP),
) -> None:
    """Measure collectives like nccl-tests: time, algbw, busbw, #wrong, in and out of place."""
    check_mps(mps, procs)
    if procs is not None:
        counts = common.int_list(procs, "--procs", minimum=1)
        backend_cls, _ = resolve_backend(backend)
        outputs_given = {"--json": json_out, "--csv": csv_out, "--plot": plot_out}
        check_procs(counts, backend_cls, None if ranks is None else str(ranks), outputs_given)
        raise typer.Exit(launch(counts, common.gpu_devices(gpus, backend_cls), common.invocation, mps))
    ranks = ranks_for([ranks] if ranks is not None else None, [8])[0]
    outputs.check_output(json_out, "--json")
    outputs.check_output(csv_out, "--csv")
    outputs.check_plot(plot_out, "--plot")
    written = (("--json", json_out), ("--csv", csv_out), ("--plot", plot_out))
    outputs.check_distinct(*written)
    named = [part for part in {collective or "", *(collective or "").split(",")} if part]
    read = [("COLLECTIVE spec", part) for part in named] + [("--spec", path) for path in spec_files or []]
    read += [("--plan", plan)] if plan not in (None, "auto") else []
    outputs.check_not_inputs(written, read)
    limits.check_choice(check, "--check", (0, 1))
    limits.check_plan_param("channels", channels, "--channels")
    specs = many_specs(collective, spec_files or [])
    counts = distribution_option(counts, specs)
    limits.check_bench(specs, maxbytes, backend, ranks, gpus, datatype, inplace, counts)
    dtype, _ = resolve_dtype(datatype)
    if fmt not in FORMATS:
        raise PurlinError(f"unknown --format '{fmt}' (known: {', '.join(FORMATS)})")
    if op not in REDOPS:
        raise PurlinError(f"unknown reduction '{op}' (known: {', '.join(REDOPS)})")
    backend_cls, why = resolve_backend(backend)
    # Every collective the backend cannot run, before the first row: found at its turn, it
    # ended a run that had already replaced --json with the rows before it.
    refusal = next(filter(None, (refuses_sizes_per_call(backend_cls, s.name) for s in specs if s.variable)), None)
    if refusal:
        raise PurlinError(refusal)
    devices = common.gpu_devices(gpus, backend_cls)
    n_ranks = len(devices) if devices else ranks
    if n_ranks < 1:
        raise PurlinError(f"--ranks must be >= 1, got {n_ranks}")
    if not -1 <= root < n_ranks:  # -1: nccl-tests' "no root"; a rooted spec refuses it below
        raise PurlinError(f"--root {root} is out of range for {n_ranks} ranks")
    top = parse_bytes(maxbytes or backend_cls.default_bench_max, "--maxbytes")
    low = parse_bytes(minbytes, "--minbytes")
    if not maxbytes and low > top:
        raise PurlinError(f"--minbytes ({low}) is above this backend's default --maxbytes ({top}): give -e too")
    sizes = sweep(low, top, stepfactor)
    for flag, value, least in (("--iters", iters, 1), ("--warmup_iters", warmup, 0), ("--cudagraph", cudagraph, 0)):
        if value < least:
            raise PurlinError(f"{flag} must be >= {least}, got {value}")
    slice_nbytes = None if slice_bytes is None else parse_bytes(slice_bytes, "--slice-bytes")
    exec_options = {"blocks": blocks, "threads": threads, "datapath": datapath, "unroll": unroll, "kernel": kernel}
    choice = _choice(strategy, plan, channels, slice_nbytes, exec_options, backend_cls, n_ranks, dtype, devices,
                     [s.name for s in specs], counts)
    # Every size's instance before the first byte of output: a rank count or
    # root a spec refuses is one error line, not a header with no rows.
    plan_text = [(spec, instances(spec, sizes, n_ranks, dtype, root, counts)) for spec in specs]
    plans = dict(choice.plan_lookup.sources) if choice.plan_lookup is not None else {}
    # --plan auto's files are known only now, still before any measurement.
    outputs.check_not_inputs(written, [("--plan", str(source)) for source in plans.values()])
    backend_obj = make(backend_cls, n_ranks, tuple(devices) if devices else None)
    baselines = _baselines(baseline, backend_obj.baselines(), backend_obj.refused_baselines())
    policy = TimingPolicy(iters=iters, warmup=warmup, reps=max(1, cudagraph or 5), graph=cudagraph > 0)
    service = MeasurementService(backend_obj)
    with backend_obj.guard():
        bandwidth = backend_obj.copy_bandwidth()
        where = backend_obj.describe()
        env = backend_obj.environment()
        layout_name = backend_obj.fingerprint().layout
    env["layout"], env["ranks"] = layout_name, n_ranks
    if plans:
        env["plans"] = plans
    options = BenchOptions(policy=policy, check=bool(check), inplace=inplace, baselines=baselines, layout=layout_name,
                           plans=plans, distribution=counts)
    measurer = Measurer(service, options, bandwidth)
    if why:  # only now: bad input above gets its one error line and nothing else
        common.note(f"{why}. Times below are CPU times of the reference executor, not GPU times.")
    timing = backend_obj.time_label(policy)
    text = fmt == NCCL_TESTS or (fmt == AUTO and not common.console.is_terminal)
    # Every line of the header is a comment, as in nccl-tests' logs. The
    # asked-for policy and what the backend did with it are both said: a
    # backend may cap them (the CPU reference does).
    say = (lambda line: print(line, flush=True)) if text else (lambda line: common.console.print(line, highlight=False))
    say(f"# purlin bench on {where}")
    say(f"# asked: -n {iters} -w {warmup} -G {cudagraph} ({iters} calls per batch, {warmup} warm-up batches, median of "
        f"{policy.reps} batches{', CUDA graphs' if policy.graph else ''})")
    say(f"# timing: {timing}")
    if REFERENCE in baselines:
        say(f"# {REFERENCE_BASELINE}")
    if bandwidth is not None:
        # The floor's yardstick, measured in this run: recorded so "% floor" can be re-derived.
        env["copy_bandwidth_gbps"] = round(bandwidth.bytes_per_s / 1e9, 1)
        env["copy_bandwidth_kind"] = bandwidth.kind
        say(f"# floor: {bandwidth.kind} copy bandwidth {bandwidth.bytes_per_s / 1e9:.0f} GB/s (cudaMemcpyAsync, this "
            f"run)")
    for name, source in plans.items():
        say(f"# plan: {name} from {source}")
    if any(spec.variable for spec in specs):
        # Sizes per call: S is of the row's total (nccl-tests' S); the counts are in each JSON row.
        env["counts"] = counts
        say(f"# counts: {counts} (sizes per call: a row's counts add up to its size S; every call of a row, and "
            f"every baseline, runs the same counts; 'count' is the largest, the chunk capacity its buffers hold)")
    command = common.command_line()
    total = sum(len(items) for _, items in plan_text)
    layout = TableLayout(baselines, common.console.width)
    records = []

    def save(complete: bool) -> None:
        # Rewritten (atomically) after every row: an interrupted sweep keeps
        # what it measured. A device or FIFO is written once, complete: a
        # pipe's reader would otherwise get the file again after every row.
        if json_out and (complete or not is_stream(json_out)):
            write_json(json_out, records, env, command, complete)
        if csv_out and (complete or not is_stream(csv_out)):
            write_csv(csv_out, records, complete)

    left_out = 0  # configurations of --strategy all the datapath refused at a size
    with common.progress_bar(rows_on_stdout=True) as progress:
        task = progress.add_task("bench", total=total)
        for spec, items in plan_text:
            kind = op if spec.op == "reduce" else "copy"
            rooted = f", root {root}" if spec.rooted else ""
            title = f"{spec.name}  ({counted(n_ranks, 'rank')}, {dtype}, {kind}{rooted})"
            if text:
                for line in nccl_log.header(title):
                    say(line)
            else:
                common.console.print(f"\n[bold]{escape(title)}[/bold]", highlight=False)
                common.console.print(layout.header())
            for size, inst, row_counts in items:
                progress.update(task, description=f"{spec.name} {size} B")
                configs = configs_for(inst, size, choice, service.default_config)
                for config in configs:
                    try:
                        record = measurer.measure(inst, config, dtype, op if spec.op == "reduce" else None, row_counts)
                    except CapacityError as exc:
                        if len(configs) == 1:
                            raise  # the one configuration asked for: the run has nothing to time
                        # --strategy all: a strategy this datapath cannot run at this size is left out, the
                        # rest timed (check reports it n/a), rather than the refusal ending the sweep; the
                        # line stands where its row would, so a saved log keeps it.
                        line = f"#   strategy {config.strategy} left out at {size} B: {exc}"
                        say(line if text else escape(line))
                        left_out += 1
                        continue
                    records.append(record)
                    if text:
                        say(nccl_log.row(record, spec.rooted, bool(check)))
                        say(nccl_log.extras(record, baselines))
                    else:
                        for part in layout.row(record):
                            common.console.print(part, highlight=False)
                    save(complete=False)
                progress.advance(task)
    if left_out and not records:
        raise PurlinError(f"nothing was timed: the datapath refused every strategy at every size ({left_out} left out)")
    for name, reason in measurer.unavailable.items():
        common.note(f"baseline {name} did not run: {reason}")
    if text:
        say("#")
    for line in summary(records):
        say(line)
    if service.build_s > 0:
        say(f"# build: {service.build_s:.1f} s building device code for these programs (once per machine: cached on "
            f"disk after)")
    failed = any(r.out_of_place.nwrong or (r.in_place and r.in_place.nwrong) for r in records)
    save(complete=True)
    if plot_out:
        from purlin_bench.tools.bench.plot import plot_rows
        from purlin_bench.tools.bench.report import json_row

        plot_rows([json_row(r) for r in records], plot_out, f"{', '.join(s.name for s in specs)} on {where}")
    if failed:
        raise PurlinError("some outputs were wrong (see #wrong)")


def _baselines(text: str, offered: tuple[str, ...], refused: dict[str, str] | None = None) -> tuple[str, ...]:
    """--baseline: names the backend offers, ``default``, ``none``; ``auto``
    is the backend's strongest. One it has but cannot run here is left out
    with a note saying why."""
    chosen = []
    for b in common.name_list(text):
        if b == AUTO:
            chosen.extend(offered[:1])
        elif b in (*offered, DEFAULT):
            chosen.append(b)
        elif refused and b in refused:
            common.note(f"baseline {b} left out: {refused[b]}")
        elif b != "none":
            raise PurlinError(f"unknown baseline '{b}' here (known: auto, {', '.join((*offered, DEFAULT))}, none)")
    return tuple(dict.fromkeys(chosen))


def _choice(strategy, plan, channels, slice_bytes, exec_options: dict, backend, ranks, dtype, gpus=None,
            collectives=(), counts: str = "uniform") -> Choice:
    plan_overrides = {k: v for k, v in (("channels", channels), ("slice_bytes", slice_bytes)) if v is not None}
    if strategy not in ("auto", "all"):
        get_strategy(strategy)  # an unknown name is refused now, not after the header at the first size
    exec_overrides = common.refuse_foreign_params(backend, exec_options)
    if plan is None:
        return Choice(strategy, plan_overrides, exec_overrides)
    from purlin_bench.plans.load import plan_lookup

    lookup = plan_lookup(plan, backend=backend.name, ranks=ranks, dtype=dtype, gpus=gpus, collectives=collectives,
                         counts=counts)
    return Choice(strategy, plan_overrides, exec_overrides, lookup)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
