"""`purlin tune`: Optuna studies per size bucket, winners as plan artifacts.

Optuna is imported only once a tune starts (it costs about a second), so
`purlin --help` and every other command stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import Progress
from rich.table import Table

from purlin_bench.cli import common, limits, outputs
from purlin_bench.dtypes import resolve_dtype
from purlin_bench.backends import AUTO, names, resolve as resolve_backend
from purlin_bench.errors import PurlinError
from purlin_bench.sizes import parse_bytes
from purlin_bench.spec.loader import load_all_builtin, resolve

ORDER = 50

_HELP = """Tune strategies and datapath parameters per message-size bucket.

One Optuna study per (GPU type, rank layout, collective, dtype, size bucket);
every trial's outputs are checked against the reference before its time counts.
Winners go to OUT/<gpu-type>/<collective>-<layout>-<dtype>.json. Studies live in
--storage (default sqlite:///OUT/tune.db): rerunning the same command resumes
them, and workers given the same URL (e.g. postgresql://...) share them.
"""


def tune(
    collective: str = typer.Argument(..., help="a collective name, a spec .yaml, or 'all'"),
    sweep: str = typer.Option("default", "--sweep", help="a built-in sweep (quick, default) or a sweep .yaml"),
    ranks: Optional[str] = typer.Option(None, "--ranks", help="virtual ranks on one device, e.g. 8 or 4,8 [default: the sweep's]"),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="one rank per GPU: '0,1,2,3' or 'all' (cupy)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="comma list of dtypes [default: the sweep's]"),
    trials: Optional[int] = typer.Option(None, "--trials", help="finished trials wanted per study, in total across restarts and workers [default: the sweep's]"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="seconds per study; no trial starts after it"),
    sampler: str = typer.Option("tpe", "--sampler", help="tpe | random | bruteforce"),
    seed: Optional[int] = typer.Option(None, "--seed", help="sampler seed (each study derives its own)"),
    confirm: int = typer.Option(3, "--confirm", help="re-measure the 3 fastest and the default this many rounds before picking; the default stays unless beaten by 2% (0: take the study's best)"),
    storage: Optional[str] = typer.Option(None, "--storage", help="study storage URL [default: sqlite:///OUT/tune.db]"),
    out: Path = typer.Option(Path("results"), "--out", help="folder of plan artifacts"),
    backend: str = typer.Option(AUTO, "--backend", help=f"{' | '.join((AUTO, *names()))} ({AUTO}: a GPU where one is usable)"),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="override the sweep's size buckets, e.g. 8,64K,1M"),
    max_bytes: Optional[str] = typer.Option(None, "--max-bytes", help="skip buckets starting above this size [default: the backend's: none on a GPU, 64M on the CPU reference]"),
) -> int:
    # Imported here: they pull Optuna's storage layer and the planner in.
    from purlin_bench.tune.driver import TuneRequest, plan_jobs, run_tune
    from purlin_bench.tune.storage import check_url, default_storage_url, open_storage
    from purlin_bench.tune.sweep import resolve_sweep
    from purlin_bench.tune.tuner import SAMPLERS, TuneSettings

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
    if timeout is not None and timeout <= 0:
        raise PurlinError(f"--timeout must be > 0 seconds, got {timeout}")
    chosen = resolve_sweep(sweep)
    specs = tuple(load_all_builtin()) if collective == "all" else (resolve(collective),)
    # Notes wait until every input is validated: bad input is one line, alone.
    notes: list[str] = []
    backend_cls, why = resolve_backend(backend)
    if why:
        notes.append(f"{why}; plans will be marked as CPU reference timings")
    devices = common.gpu_devices(gpus, backend_cls)
    if sizes:
        chosen = chosen.with_sizes([parse_bytes(s, "--sizes") for s in common.name_list(sizes)])
    # A CPU reference's times mean nothing for a GPU and its memory is the
    # machine's: the backend says how far a tune goes unless asked.
    cap = max_bytes or backend_cls.default_tune_max
    if cap:
        kept = chosen.capped(parse_bytes(cap, "--max-bytes"))
        if not kept.buckets:
            raise PurlinError(f"no size bucket starts at or below --max-bytes {cap}")
        if len(kept.buckets) < len(chosen.buckets) and not max_bytes:
            notes.append(f"{backend_cls.name} backend: skipping buckets above {cap} (--max-bytes to change)")
        chosen = kept
    dtypes = tuple(resolve_dtype(d)[0] for d in common.name_list(dtype)) if dtype else chosen.dtypes
    rank_counts = tuple(common.int_list(ranks, "--ranks", minimum=1)) if ranks else chosen.ranks
    request = TuneRequest(
        collectives=specs,
        sweep=chosen,
        dtypes=dtypes,
        ranks=rank_counts,
        gpus=tuple(devices) if devices else None,
        backend=backend_cls.name,
        settings=TuneSettings(trials=trials or chosen.trials, sampler=sampler, seed=seed, timeout_s=timeout, confirm_rounds=confirm),
        storage_url=storage or default_storage_url(out),
        out_dir=out,
    )
    study_storage = open_storage(request.storage_url)
    for message in notes:
        common.note(message)
    jobs = plan_jobs(request)
    if not jobs:
        raise PurlinError("nothing to tune: no collective supports the asked rank counts")
    studies = len(jobs) * len(chosen.buckets)
    with common.progress_bar() as progress:
        reporter = _ProgressReporter(progress, studies * request.settings.trials, request.settings.trials)
        results = run_tune(request, reporter, study_storage)
    for message in reporter.notes:
        common.note(message)
    common.console.print(_winners(results, backend_cls.timing_kind != "gpu"))
    for result in results:
        if result.path is not None:
            common.console.print(f"wrote {result.path}", highlight=False)
    missing = [b for r in results for b in r.buckets if b.entry is None]
    if missing:
        raise PurlinError(f"{len(missing)} bucket(s) got no correct configuration (see the notes above)")
    return 0


class _ProgressReporter:
    """A tune.driver.Reporter that draws one bar over all studies: each study is worth ``trials`` steps,
    advanced per finished trial and topped up when the study ends (a resumed
    study may already hold most of its trials)."""

    def __init__(self, progress: Progress, total: int, per_study: int):
        self.progress = progress
        self.per_study = per_study
        self.task = progress.add_task("tune", total=total)
        self.done_in_study = 0
        self.notes: list[str] = []

    def study_started(self, name: str) -> None:
        self.done_in_study = 0
        self.progress.update(self.task, description=name.removeprefix("purlin/").rsplit("/space-", 1)[0])

    def trial_finished(self, name: str, result) -> None:
        if self.done_in_study < self.per_study:
            self.done_in_study += 1
            self.progress.advance(self.task)

    def study_finished(self, name: str, outcome) -> None:
        self.progress.advance(self.task, self.per_study - self.done_in_study)
        self.done_in_study = self.per_study

    def note(self, message: str) -> None:
        self.notes.append(message)  # printed after the bar, which is transient


def _winners(results, reference_times: bool) -> Table:
    title = "tuned plans" + (" (CPU reference timings, not GPU performance)" if reference_times else "")
    table = Table(title=title)
    for name, justify in (("collective", "left"), ("dtype", "left"), ("layout", "left"), ("bucket", "left"), ("winner", "left"), ("time (us)", "right"), ("busbw (GB/s)", "right"), ("default (us)", "right"), ("vs default", "right"), ("baseline (us)", "right"), ("vs baseline", "right"), ("trials", "right")):
        table.add_column(name, justify=justify)
    for result in results:
        for b in result.buckets:
            base = [result.job.spec.name, result.job.dtype, b.layout, b.bucket.text()]
            if b.entry is None:
                table.add_row(*base, "no correct configuration", *[""] * 6, str(b.outcome.finished))
                continue
            e = b.entry
            table.add_row(
                *base,
                e.config.text(),
                f"{e.time_us:.2f}",
                f"{e.busbw_gbps:.3g}",
                _maybe(e.default_time_us, "{:.2f}"),
                _maybe(e.speedup_over_default(), "{:.2f}x"),
                _maybe(e.baseline_time_us, "{:.2f}"),
                _maybe(e.speedup_over_baseline(), "{:.2f}x"),
                f"{b.outcome.finished}/{b.outcome.wanted}" + ("" if b.outcome.stop == "done" else f" ({b.outcome.stop})"),
            )
    return table


def _maybe(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def register(app: typer.Typer) -> None:
    app.command("tune", help=_HELP)(tune)
