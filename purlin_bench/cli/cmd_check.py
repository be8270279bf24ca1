"""``purlin check``: run every combination asked for on random inputs and
compare with the spec's reference semantics. Exit code 0 only if all passed."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperCommand

from purlin_bench.tools import check as m
from purlin_bench.cli.limits import check_check, check_given
from purlin_bench.cli.common import (console, err_console, gpu_devices, int_list, invocation, note, param_help,
                                     refuse_foreign_params)
from purlin_bench.cli.procs import MPS_HELP, PROCS_HELP, check_mps, check_procs, launch, ranks_for
from purlin_bench.cli.targets import many_specs
from purlin_bench.backends import AUTO, REFERENCE, names, resolve
from purlin_bench.base.errors import PurlinError

ORDER = 30
# Below this many runs a progress bar only flickers.
PROGRESS_MIN_JOBS = 20
PROGRESS_LINE_S = 30.0
_INPLACE_WORDS = {"both": (False, True), "yes": (True,), "no": (False,)}


class _CheckCommand(TyperCommand):
    """Accepts ``--inplace both`` (and yes/no) besides the ``--inplace`` and
    ``--no-inplace`` flags: click has no option whose value is optional, so
    the word after ``--inplace`` is moved to the hidden ``--inplace-mode``."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        rewritten: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--inplace" and i + 1 < len(args) and args[i + 1] in _INPLACE_WORDS:
                rewritten += ["--inplace-mode", args[i + 1]]
                i += 2
                continue
            if arg.startswith("--inplace="):
                rewritten += ["--inplace-mode", arg.split("=", 1)[1]]
            else:
                rewritten.append(arg)
            i += 1
        return super().parse_args(ctx, rewritten)


def _inplace_modes(flag: bool | None, word: str | None) -> tuple[bool, ...]:
    if word is not None:
        if word not in _INPLACE_WORDS:
            raise PurlinError(f"--inplace takes no value or one of {', '.join(_INPLACE_WORDS)}, got '{word}'")
        return _INPLACE_WORDS[word]
    return _INPLACE_WORDS["both"] if flag is None else (flag,)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


_STATUS_STYLE = {m.PASS: "green", m.FAIL: "bold red", m.ERROR: "bold red", m.NA: "dim"}


def results_table(outcomes: list[m.Outcome]) -> Table:
    table = Table(title="purlin check", title_justify="left")
    # A counts column only where a collective's sizes come per call: there
    # the count is a chunk's capacity, and this says how each call drew its counts.
    counts = any(o.combo.counts for o in outcomes)
    for name in ("collective", "ranks", "root", "count", *(("counts",) if counts else ()), "dtype", "op", "strategy",
                 "in-place", "steps", "#wrong", "status", "note"):
        table.add_column(name, justify="right" if name in ("ranks", "root", "count", "steps", "#wrong") else "left",
                         overflow="fold")
    for o in outcomes:
        c = o.combo
        table.add_row(
            c.collective,
            str(c.ranks),
            _cell(c.root),
            str(c.count) if c.dtype != "-" else "-",
            *((_cell(c.counts),) if counts else ()),
            c.dtype,
            c.redop or ("-" if c.dtype == "-" else "copy"),
            c.strategy,
            ("yes" if c.inplace else "no") if c.strategy != "-" else "-",
            _cell(o.steps),
            _cell(o.wrong),
            f"[{_STATUS_STYLE[o.status]}]{o.status}[/]",
            o.note,
        )
    return table


def summary(outcomes: list[m.Outcome], seconds: float, backend: str) -> dict:
    counts = {status: sum(o.status == status for o in outcomes) for status in (m.PASS, m.FAIL, m.ERROR, m.NA)}
    return {"passed": counts[m.PASS], "failed": counts[m.FAIL], "errors": counts[m.ERROR],
            "not_applicable": counts[m.NA], "seconds": round(seconds, 2), "backend": backend}


def _run_all(items: list, runner: m.JobRunner, show_progress: bool) -> list[m.Outcome]:
    jobs = sum(isinstance(item, m.Job) for item in items)
    outcomes: list[m.Outcome] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # Without a terminal (a log, CI, a run cut by a time limit) a line now and
    # then says how far the check got; the bar would print nothing.
    lines = not err_console.is_terminal and jobs >= PROGRESS_MIN_JOBS
    start = last_line = time.perf_counter()
    done = 0
    with Progress(*columns, console=err_console, transient=True,
                  disable=not show_progress or jobs < PROGRESS_MIN_JOBS) as progress:
        task = progress.add_task("checking", total=jobs)
        for item in items:
            if isinstance(item, m.Outcome):
                outcomes.append(item)
                continue
            c = item.combo
            progress.update(task, description=f"{c.collective} R={c.ranks} {c.strategy} {c.dtype}")
            outcomes.append(runner.run(item))
            progress.advance(task)
            done += 1
            now = time.perf_counter()
            if lines and now - last_line >= PROGRESS_LINE_S and done < jobs:
                last_line = now
                failed = sum(o.failed for o in outcomes)
                note(f"checked {done} of {jobs} in {now - start:.0f} s, {failed} failed (last: {c.collective} "
                     f"R={c.ranks} {c.strategy} {c.dtype} count {c.count})")
    return outcomes


def check(
    collective: Optional[str] = typer.Argument(None, help="A built-in collective, 'all', or a path to a .yaml spec."),
    ranks: Optional[str] = typer.Option(None, "--ranks",
                                        help="Rank counts, comma separated [default: 2,3,8; with --procs the run's]."),
    strategy: str = typer.Option("all", "--strategy", "-s", help="'all' (every strategy) or names, comma separated."),
    dtype: str = typer.Option("float32", "--dtype", "-d",
                              help="'all' or dtypes, comma separated (float32, float64, float16, bfloat16, int32, "
                                   "float8_e4m3fn, float8_e5m2)."),
    count: str = typer.Option("1001", "--count",
                              help="Element counts, comma separated (see 'count' in README: per chunk or per buffer; "
                                   "with sizes per call, the most one chunk holds)."),
    counts: Optional[str] = typer.Option(None, "--counts",
                                         help="Sizes per call (all-to-all-v, ...): how each call draws its counts, "
                                              "0..--count each: uniform, skewed (as MoE routing), hot (one rank "
                                              "takes everything), sparse (half 0) or all [default: all, a call each]."),
    root: str = typer.Option("all", "--root",
                             help="'all' (every rank) or roots, comma separated; rooted collectives only."),
    op: Optional[str] = typer.Option(None, "--op",
                                     help="Reduction: sum, prod, max, min, 'all' or a comma list (default: the "
                                          "spec's)."),
    inplace: Optional[bool] = typer.Option(None, "--inplace/--no-inplace",
                                           help="Only in place / only out of place; '--inplace both' (the default) "
                                                "runs both."),
    inplace_mode: Optional[str] = typer.Option(None, "--inplace-mode", hidden=True),
    backend: str = typer.Option(REFERENCE, "--backend",
                                help=f"{' | '.join((AUTO, *names()))} ({AUTO}: a GPU where one is usable, else the CPU "
                                     f"reference)."),
    spec_files: Optional[list[str]] = typer.Option(None, "--spec",
                                                   help="A user's collective spec (.yaml) to check; repeatable."),
    seed: int = typer.Option(0, "--seed", min=0,
                             help="Seed of the random inputs and of the CPU executor's interleaving."),
    failed_only: bool = typer.Option(False, "--failed-only",
                                     help="List only failed combinations in the table (the summary counts all)."),
    as_json: bool = typer.Option(False, "--json", help="Print results and summary as JSON to stdout."),
    gpus: Optional[str] = typer.Option(None, "--gpus",
                                       help="One rank per GPU: '0,1,2,3' or 'all' (cupy); replaces --ranks."),
    procs: Optional[str] = typer.Option(None, "--procs", help=PROCS_HELP),
    mps: bool = typer.Option(False, "--mps", help=MPS_HELP),
    kernel: Optional[str] = typer.Option(None, "--kernel", help=f"{param_help('kernel')}; default: its own."),
) -> None:
    """Check collectives against their reference semantics, for every
    combination of rank count, root, count, dtype, reduction, strategy and
    in-place asked for. Strategies that do not apply are n/a, not failures."""
    chosen, why = resolve(backend)
    exec_params = _datapath(chosen, {"kernel": kernel})
    devices = gpu_devices(gpus, chosen)
    check_mps(mps, procs)
    check_given(ranks, "--ranks")  # '' is not the default's 2,3,8
    if procs is not None:
        layouts = int_list(procs, "--procs", minimum=1)
        check_procs(layouts, chosen, ranks, {"--json": as_json})
        raise typer.Exit(launch(layouts, devices, invocation, mps))
    given = int_list(ranks, "--ranks", minimum=1) if ranks else None
    request = m.Request(
        specs=tuple(many_specs(collective, spec_files or [])),
        ranks=(len(devices),) if devices else tuple(ranks_for(given, [2, 3, 8])),
        strategies=m.parse_strategies(strategy),
        dtypes=m.parse_dtypes(dtype),
        counts=tuple(int_list(count, "--count", minimum=0)),
        roots=None if root.strip() == "all" else tuple(int_list(root, "--root", minimum=0)),
        redops=m.parse_redops(op),
        inplace=_inplace_modes(inplace, inplace_mode),
    )
    request = replace(request, distribution=m.parse_counts(counts, request.specs))
    check_check(request, chosen)  # bounds first: expand instantiates every combination
    items = list(m.expand(request))
    if not any(isinstance(item, m.Job) or item.failed for item in items):  # a refused spec is reported below
        first = next((o.note for o in items if isinstance(o, m.Outcome) and o.note), "")
        raise PurlinError(f"nothing to check: every combination asked for is n/a ({first})")
    if why:
        note(why)
    start = time.perf_counter()
    runner = m.JobRunner(chosen, seed, devices, exec_params)
    outcomes = _run_all(items, runner, show_progress=not as_json and err_console.is_terminal)
    totals = summary(outcomes, time.perf_counter() - start, chosen.name)
    if as_json:
        print(json.dumps({"results": [o.to_dict() for o in outcomes], "summary": totals}, indent=2))
    else:
        shown = [o for o in outcomes if o.failed] if failed_only else outcomes
        if shown:
            console.print(results_table(shown))
        failed = totals["failed"] + totals["errors"]
        verdict = "[green]all passed[/]" if not failed else f"[bold red]{failed} failed[/]"
        console.print(
            f"{verdict}: {totals['passed']} passed, {totals['failed']} wrong, {totals['errors']} errors, "
            f"{totals['not_applicable']} n/a; {totals['seconds']:.1f} s on {chosen.name}",
            highlight=False,
        )
        # Where the ranks ran, as bench's header says it: with processes on
        # one GPU, whether they ran concurrently (MPS) or time-sliced.
        for service in runner.services.values():
            console.print(f"# on {service.backend.describe()}", highlight=False, markup=False)
    if totals["failed"] or totals["errors"]:
        raise typer.Exit(1)


def _datapath(backend, given: dict) -> dict:
    """The datapath parameters asked for, checked against ``backend``'s."""
    asked = refuse_foreign_params(backend, given)
    params = {p.name: p for p in backend.params}
    for name, value in asked.items():
        try:
            params[name].check(value)
        except PurlinError as exc:  # "kernel must be one of ...": the option's name
            raise PurlinError(f"--{exc}") from None
    return asked


def register(app: typer.Typer) -> None:
    app.command("check", cls=_CheckCommand)(check)
