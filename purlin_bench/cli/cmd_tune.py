"""`purlin tune`: Optuna studies per size bucket, winners as plan artifacts.

Optuna is imported only once a tune starts (it costs about a second), so
`purlin --help` and every other command stay fast.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.progress import Progress
from rich.console import Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from purlin_bench.cli import common, limits, outputs
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.backends import AUTO, names, resolve as resolve_backend
from purlin_bench.backends.port import refuses_sizes_per_call
from purlin_bench.cli.procs import MPS_HELP, PROCS_HELP, check_mps, check_procs, launch, ranks_for
from purlin_bench.base.errors import PurlinError
from purlin_bench.base.sizes import counted, parse_bytes
from purlin_bench.cli.targets import many_specs
from purlin_bench.spec.variable import distribution_option

ORDER = 50
_DEFAULT_SWEEP = "default"
# Each round re-measures 4 finalists per study: 100 rounds is already far
# past where the median stops moving, and a billion never ends.
MAX_CONFIRM = 100
_CONFIRM_WHY = "each round re-measures the finalists of every study"

_HELP = """Tune strategies and datapath parameters per message-size bucket.

One Optuna study per (GPU type, rank layout, collective, dtype, size bucket);
every trial's outputs are checked against the reference before its time counts.
Winners go to OUT/<gpu-type>/<collective>-<layout>-<dtype>[-<counts>].json. Studies live in
--storage (default sqlite:///OUT/tune.db): rerunning the same command resumes
them (a complete plan is left as it is unless --force), and workers given the
same URL (e.g. postgresql://...) share them. On the CPU reference a default
tune is short: small buckets and few trials, said in a note.
"""


def tune(
    collective: Optional[str] = typer.Argument(None, help="a collective name, a spec .yaml, or 'all' (or --spec)"),
    spec_files: Optional[list[str]] = typer.Option(None, "--spec", help="a user's collective spec (.yaml); repeatable"),
    sweep: str = typer.Option(_DEFAULT_SWEEP, "--sweep", help="a built-in sweep (quick, default) or a sweep .yaml"),
    ranks: Optional[str] = typer.Option(None, "--ranks",
                                        help="virtual ranks on one device, e.g. 8 or 4,8 [default: the sweep's]"),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="one rank per GPU: '0,1,2,3' or 'all' (cupy)"),
    dtype: Optional[str] = typer.Option(None, "-d", "--dtype", help="comma list of dtypes [default: the sweep's]"),
    trials: Optional[int] = typer.Option(None, "--trials",
                                         help="finished trials wanted per study, in total across restarts and workers "
                                              "[default: the sweep's]"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="seconds per study; no trial starts after it"),
    sampler: str = typer.Option("tpe", "--sampler", help="tpe | random | bruteforce"),
    seed: Optional[int] = typer.Option(None, "--seed", min=0, help="sampler seed (each study derives its own)"),
    confirm: int = typer.Option(3, "--confirm",
                                help="re-measure the 3 fastest and the default this many rounds before picking; the "
                                     "default stays unless beaten by 2% (0: take the study's best)"),
    storage: Optional[str] = typer.Option(None, "--storage", help="study storage URL [default: sqlite:///OUT/tune.db]"),
    out: Optional[str] = typer.Option(None, "--out",
                                      help="folder of plan artifacts [default: results/ on a GPU, results-cpu/ "
                                           "(git-ignored) for CPU timings]"),
    backend: str = typer.Option(AUTO, "--backend",
                                help=f"{' | '.join((AUTO, *names()))} ({AUTO}: a GPU where one is usable)"),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="override the sweep's size buckets, e.g. 8,64K,1M"),
    max_bytes: Optional[str] = typer.Option(None, "--max-bytes",
                                            help="keep only buckets that end at or below this size [default: the "
                                                 "backend's: none on a GPU, 64K on the CPU reference]"),
    force: bool = typer.Option(False, "--force",
                               help="confirm the finalists again and rewrite plans that are already complete"),
    counts: Optional[str] = typer.Option(None, "--counts",
                                         help="sizes per call (all-to-all-v, ...): how each bucket's counts are "
                                              "drawn, adding up to its size (uniform, the default; skewed, hot, "
                                              "sparse); part of the plan's name"),
    procs: Optional[str] = typer.Option(None, "--procs", help=PROCS_HELP),
    mps: bool = typer.Option(False, "--mps", help=MPS_HELP),
) -> int:
    # Imported here: they pull Optuna's storage layer and the strategies in.
    from purlin_bench.tools.tune.driver import TuneRequest, check_targets, plan_jobs, run_tune
    from purlin_bench.tools.tune.storage import check_url, default_storage_url, open_storage
    from purlin_bench.tools.tune.sweep import resolve_sweep
    from purlin_bench.tools.tune.tuner import SAMPLERS, TuneSettings
    from purlin_bench.plans.load import default_results_dir

    limits.check_given(sizes, "--sizes")
    limits.check_given(ranks, "--ranks")
    limits.check_given(dtype, "--dtype")
    if ranks:
        limits.check_ranks(common.int_list(ranks, "--ranks", minimum=1))
    if storage is not None:
        check_url(storage)
    outputs.check_output_dir(out, "--out")
    if sampler not in SAMPLERS:
        raise PurlinError(f"unknown sampler '{sampler}' (known: {', '.join(SAMPLERS)})")
    if trials is not None and trials < 1:
        raise PurlinError(f"--trials must be >= 1, got {trials}")
    if confirm < 0:
        raise PurlinError(f"--confirm must be >= 0 rounds, got {confirm}")
    if confirm > MAX_CONFIRM:
        raise PurlinError(f"--confirm must be at most {MAX_CONFIRM} rounds, got {confirm} ({_CONFIRM_WHY})")
    # `not (x > 0)`, not `x <= 0`: NaN compares false both ways and would pass.
    if timeout is not None and not (0 < timeout < float("inf")):
        raise PurlinError(f"--timeout must be a finite number of seconds > 0, got {timeout}")
    chosen = resolve_sweep(sweep)
    specs = tuple(many_specs(collective, spec_files or []))
    counts = distribution_option(counts, specs)
    check_mps(mps, procs)
    if procs is not None:
        processes = common.int_list(procs, "--procs", minimum=1)
        backend_cls, _ = resolve_backend(backend)
        check_procs(processes, backend_cls, ranks)
        raise typer.Exit(launch(processes, common.gpu_devices(gpus, backend_cls), common.invocation, mps))
    # Notes wait until every input is validated: bad input is one line, alone.
    notes: list[str] = []
    backend_cls, why = resolve_backend(backend)
    if why:
        notes.append(f"{why}; plans will be marked as CPU reference timings")
    devices = common.gpu_devices(gpus, backend_cls)
    specs = _runnable(specs, backend_cls, collective == "all", notes)
    if counts != "uniform" and not any(spec.variable for spec in specs):
        notes.append(f"--counts {counts} is for collectives whose sizes come per call; none is tuned here")
    if sizes:
        chosen = chosen.with_sizes(list(dict.fromkeys(parse_bytes(s, "--sizes") for s in common.name_list(sizes))))
    chosen, trials, short = _backend_limits(backend_cls, chosen, max_bytes, trials, sweep_given=sweep != _DEFAULT_SWEEP)
    if short:
        notes.append(short)
    # A str until checked: typer's Path would read --out '' as '.', the current folder.
    out = Path(out) if out is not None else Path(default_results_dir(backend_cls.name))
    dtypes = tuple(dict.fromkeys(resolve_dtype(d)[0] for d in common.name_list(dtype))) if dtype else chosen.dtypes
    rank_counts = tuple(ranks_for(common.int_list(ranks, "--ranks", minimum=1) if ranks else None, list(chosen.ranks)))
    request = TuneRequest(
        collectives=specs,
        sweep=chosen,
        dtypes=dtypes,
        ranks=rank_counts,
        gpus=tuple(devices) if devices else None,
        backend=backend_cls.name,
        settings=TuneSettings(trials=trials or chosen.trials, sampler=sampler, seed=seed, timeout_s=timeout,
                              confirm_rounds=confirm),
        storage_url=storage or default_storage_url(out),
        out_dir=out,
        force=force,
        counts=counts,
    )
    limits.check_tune(plan_jobs(request), chosen, backend_cls)
    check_targets(request)  # before the storage and the notes: a refusal is one line, alone
    study_storage = open_storage(request.storage_url)
    for message in notes:
        common.note(message)
    jobs = plan_jobs(request)
    if not jobs:
        raise PurlinError("nothing to tune: no collective supports the asked rank counts")
    studies = len(jobs) * len(chosen.buckets)
    with common.progress_bar() as progress:
        reporter = _ProgressReporter(progress, studies, request.settings.trials)
        try:
            results = run_tune(request, reporter, study_storage)
        except KeyboardInterrupt:
            # Every finished trial is in storage already; the running one is queued again.
            progress.stop()
            print(f"interrupted: {counted(reporter.kept, 'trial')} kept; rerun the same command to resume",
                  file=sys.stderr, flush=True)
            raise typer.Exit(130) from None
    for message in reporter.notes:
        common.note(message)
    common.console.print(_winners(results, not backend_cls.times_gpu(), common.console), soft_wrap=True)
    for result in results:
        if result.path is not None and not result.up_to_date:  # an up-to-date one was said in the progress
            common.console.print(f"wrote {result.path}", highlight=False)
    missing = [b for r in results for b in r.buckets if b.entry is None]
    if missing:
        raise PurlinError(f"{len(missing)} bucket(s) got no correct configuration (see the notes above)")
    return 0


def _backend_limits(backend_cls, chosen, max_bytes: str | None, trials: int | None, sweep_given: bool):
    """The sweep and trial count the backend's defaults leave, and the one
    note that says what they cut. A CPU reference's times mean nothing for a
    GPU and its memory and cores are the machine's: unless asked, a tune
    there keeps to small buckets and few trials, so it ends in about a minute."""
    cuts = []
    cap = max_bytes or backend_cls.default_tune_max
    if cap:
        kept = chosen.capped(parse_bytes(cap, "--max-bytes"))
        if not kept.buckets:
            if max_bytes:
                raise PurlinError(f"no size bucket ends at or below --max-bytes {cap}")
            # The backend's cap is a default, not a refusal: the smallest bucket is as small as this sweep goes.
            kept = replace(chosen, buckets=chosen.buckets[:1])
        if len(kept.buckets) < len(chosen.buckets) and not max_bytes:
            cuts.append(f"{len(kept.buckets)} of {len(chosen.buckets)} size buckets (up to {kept.buckets[-1].text()})")
        chosen = kept
    # Only the default sweep's trials are cut: a sweep the user names keeps
    # the count it asks for (two workers sharing a study must agree on it).
    short_trials = backend_cls.default_tune_trials
    if trials is None and not sweep_given and short_trials and chosen.trials > short_trials:
        cuts.append(f"{counted(short_trials, 'trial')} per study, not the sweep's {chosen.trials}")
        trials = short_trials
    note = None
    if cuts:
        note = f"{backend_cls.name} backend: a short tune: {' and '.join(cuts)} (--max-bytes and --trials to change)"
    return chosen, trials, note


class _ProgressReporter:
    """A tune.driver.Reporter. On a terminal, one transient bar over all
    studies; on every stderr, a terminal or a log, one plain line per study
    once its finals are done (trials, elapsed, an estimate of the time left),
    and a line when a study resumes with trials already in storage."""

    def __init__(self, progress: Progress, studies: int, per_study: int):
        self.progress = progress
        self.studies = studies
        self.per_study = per_study
        self.task = progress.add_task("tune", total=studies * per_study)
        self.done_in_study = 0
        self.finished = 0  # studies settled
        self.kept = 0  # finished trials in storage for this tune's studies: what an interruption keeps
        self.started = time.monotonic()
        self.measured_s = 0.0  # time spent in studies that ran (up-to-date plans cost none)
        self.measured = 0
        self.study_started_at = self.started
        self.notes: list[str] = []

    def _line(self, text: str) -> None:
        # Through the bar's console, so that on a terminal the line lands above the bar.
        self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def study_resumed(self, name: str, bucket, kept: int, wanted: int) -> None:
        self.kept += kept
        more = f", {wanted - kept} to run" if kept < wanted else ", none to run"
        self._line(f"resuming {_label(name, bucket.text())}: {kept} finished trials kept{more}")

    def study_started(self, name: str) -> None:
        self.done_in_study = 0
        self.study_started_at = time.monotonic()
        self.progress.update(self.task, description=_label(name))

    def trial_finished(self, name: str, result) -> None:
        self.kept += 1
        if self.done_in_study < self.per_study:
            self.done_in_study += 1
            self.progress.advance(self.task)

    def study_finished(self, name: str, outcome) -> None:
        self.progress.advance(self.task, self.per_study - self.done_in_study)
        self.done_in_study = self.per_study
        self.progress.update(self.task, description=f"{_label(name)}: confirming the finalists")

    def bucket_done(self, result) -> None:
        self.finished += 1
        self.measured += 1
        self.measured_s += time.monotonic() - self.study_started_at
        o = result.outcome
        stop = "" if o.stop == "done" else f", stopped: {o.stop}"
        winner = "no correct configuration" if result.entry is None else f"winner {result.entry.config.text()}"
        self._line(f"study {self.finished}/{self.studies} {_label(o.name, result.bucket.text())}: "
                   f"{o.finished}/{counted(o.wanted, 'trial')} ({o.ran} run now){stop}, finals done, {winner}; "
                   f"{self._clock()}")

    def job_up_to_date(self, result) -> None:
        for b in result.buckets:
            self.finished += 1
            self.kept += b.outcome.finished
            self.progress.advance(self.task, self.per_study)
        self._line(f"up to date: {result.path} holds every bucket's trials ({counted(len(result.buckets), 'bucket')}); "
                   f"nothing measured (--force to confirm again and rewrite)")

    def _clock(self) -> str:
        elapsed = time.monotonic() - self.started
        left = self.studies - self.finished
        if not left:
            return f"{elapsed:.0f} s elapsed"
        per_study = self.measured_s / self.measured if self.measured else 0.0
        return f"{elapsed:.0f} s elapsed, about {per_study * left:.0f} s left"

    def note(self, message: str) -> None:
        self.notes.append(message)  # printed after the bar, which is transient


def _runnable(specs, backend_cls, everything: bool, notes: list[str]) -> tuple:
    """The specs this backend can tune: one whose sizes come per call on a
    backend that runs none is refused in one line, or left out of 'all' with
    a note (as bench refuses it), not tried trial after trial."""
    left = [spec.name for spec in specs if spec.variable and refuses_sizes_per_call(backend_cls, spec.name)]
    if left and not everything:
        raise PurlinError(refuses_sizes_per_call(backend_cls, left[0]))
    if left:
        notes.append(f"'all' leaves out {', '.join(left)}: backend {backend_cls.name} runs no variable-size program")
    return tuple(spec for spec in specs if spec.name not in left)


def _label(study: str, bucket: str | None = None) -> str:
    """purlin/<gpu>/<layout>/<collective>/<dtype>[/counts-<d>]/<bucket>/at-.../space-...
    -> '<collective> <dtype> <layout> <bucket>' (with '(<d> counts)' after the collective)."""
    parts = study.split("/")
    counts = ""
    if len(parts) > 5 and parts[5].startswith("counts-"):
        counts = f" ({parts.pop(5).removeprefix('counts-')} counts)"
    if len(parts) < 6:
        return study
    return f"{parts[3]}{counts} {parts[4]} {parts[2]} {bucket or parts[5]}"


def _winners(results, reference_times: bool, console) -> Table | Group:
    """The tuned plans, one row per bucket; where that table does not fit the
    terminal (12 columns need about 170), two lines per bucket instead. The
    winner is what the table is for: it is never cut to 'two-sh…'."""
    title = "tuned plans" + (" (CPU reference timings, not GPU performance)" if reference_times else "")
    if reference_times:
        from purlin_bench.cli.cmd_bench import REFERENCE_BASELINE

        title += f"; {REFERENCE_BASELINE}"
    table = Table(title=title)
    left = ("collective", "dtype", "layout", "bucket", "winner")
    right = ("time (us)", "busbw (GB/s)", "default (us)", "vs default", "baseline (us)", "vs baseline", "trials")
    for name, justify in [(n, "left") for n in left] + [(n, "right") for n in right]:
        table.add_column(name, justify=justify, no_wrap=True)
    lines: list[Text] = [Text(title, style="bold")]
    for result in results:
        for b in result.buckets:
            counts = f" ({result.job.counts} counts)" if result.job.counts else ""  # sizes per call: the plan's key
            base = [result.job.spec.name + counts, result.job.dtype, b.layout, b.bucket.text()]
            stopped = "" if b.outcome.stop == "done" else f" ({b.outcome.stop})"
            trials = f"{b.outcome.finished}/{b.outcome.wanted}{stopped}"
            if b.entry is None:
                table.add_row(*base, "no correct configuration", *[""] * 6, str(b.outcome.finished))
                lines.append(Text(f"{' '.join(base)}: no correct configuration ({trials} trials)"))
                continue
            e = b.entry
            cells = [
                f"{e.time_us:.2f}",
                f"{e.busbw_gbps:.2f}",  # as bench prints it: fixed, never 5.62e-05 beside 0.02
                _maybe(e.default_time_us, "{:.2f}"),
                _maybe(e.speedup_over_default(), "{:.2f}x"),
                _maybe(e.baseline_time_us, "{:.2f}"),
                _maybe(e.speedup_over_baseline(), "{:.2f}x"),
                trials,
            ]
            table.add_row(*base, e.config.text(), *cells)
            lines.append(Text(f"{' '.join(base)}: {e.config.text()}"))
            lines.append(Text(f"    {cells[0]} us, busbw {cells[1]} GB/s, {cells[3]} vs default, {cells[5]} vs "
                              f"baseline, {trials} trials", style="dim"))
    if Measurement.get(console, console.options.update(max_width=1 << 16), table).maximum <= console.width:
        return table
    return Group(*lines)


def _maybe(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def register(app: typer.Typer) -> None:
    app.command("tune", help=_HELP)(tune)
