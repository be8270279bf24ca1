"""``purlin tune`` without the command line: from a request (collectives,
sweep, dtypes, rank layouts, backend, storage) to studies and plan artifacts.

For every rank layout, collective and dtype, one study per size bucket
(tune.tuner.run_study) with the measurement service's check and measure
(tune.measure); the winners become one plan file (purlin_bench.plans), written
atomically once all of its buckets are done. Studies are named by what they
measure, so rerunning the same request with the same storage resumes them:

    purlin/<gpu-type>/<layout>/<collective>/<dtype>/<bucket>/space-<hash>
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import purlin_bench
from purlin_bench.backends import backend_class, make
from purlin_bench.base.config import RunConfig
from purlin_bench.base.errors import PurlinError
from purlin_bench.base.hardware import Fingerprint
from purlin_bench.measure.service import MeasurementService
from purlin_bench.base.textfile import writable_refusal
from purlin_bench.plans import PlanArtifact, PlanEntry, SweepRef, load_plan_file, plan_path, write_plan
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.tools.tune.effective import effective_config
from purlin_bench.tools.tune.finals import pick
from purlin_bench.tools.tune.measure import ServiceBench
from purlin_bench.tools.tune.storage import lost_storage, open_storage, storage_errors
from purlin_bench.tools.tune.sweep import Bucket, Sweep, format_bytes
from purlin_bench.tools.tune.tuner import StudyOutcome, StudySpec, TrialResult, TuneSettings, count_finished, run_study


@dataclass(frozen=True)
class TuneRequest:
    collectives: tuple[CollectiveSpec, ...]
    sweep: Sweep
    dtypes: tuple[str, ...]
    ranks: tuple[int, ...]  # virtual ranks on one device; ignored when gpus is set
    gpus: tuple[int, ...] | None  # one rank per GPU
    backend: str  # a backend's registry name, already resolved (backends.resolve)
    settings: TuneSettings
    storage_url: str
    out_dir: Path
    force: bool = False  # confirm the finalists again and rewrite a plan that is already complete
    # Sizes per call: how each bucket's call counts are drawn (spec.variable.DISTRIBUTIONS);
    # a plan's key for those collectives, ignored for the rest.
    counts: str = "uniform"


@dataclass(frozen=True)
class Job:
    """One plan artifact: a collective and dtype on one rank layout."""

    spec: CollectiveSpec
    dtype: str
    ranks: int
    counts: str | None = None  # a variable collective's counts distribution; None for fixed sizes


@dataclass(frozen=True)
class BucketResult:
    job: Job
    layout: str
    bucket: Bucket
    outcome: StudyOutcome
    entry: PlanEntry | None  # None: no correct configuration was found


@dataclass(frozen=True)
class JobResult:
    job: Job
    path: Path | None  # the artifact written (or found complete), if any bucket has a winner
    buckets: tuple[BucketResult, ...]
    up_to_date: bool = False  # the plan already held every bucket's trials: nothing measured or written


class Reporter:
    """What the driver tells its caller; the CLI draws progress from it."""

    def study_started(self, name: str) -> None: ...

    def trial_finished(self, name: str, result: TrialResult) -> None: ...

    def study_finished(self, name: str, outcome: StudyOutcome) -> None: ...

    def study_resumed(self, name: str, bucket: Bucket, kept: int, wanted: int) -> None:
        """Before study_started, when storage already holds ``kept`` of its finished trials."""

    def bucket_done(self, result: "BucketResult") -> None:
        """After the study and its finals: the bucket's entry is settled."""

    def job_up_to_date(self, result: "JobResult") -> None:
        """A job skipped: its plan already holds every bucket's trials."""

    def note(self, message: str) -> None: ...


def plan_jobs(request: TuneRequest) -> list[Job]:
    ranks_list = (len(request.gpus),) if request.gpus else request.ranks
    return [Job(spec, dtype, ranks, request.counts if spec.variable else None) for ranks in ranks_list
            for spec in request.collectives if spec.supports_ranks(ranks) for dtype in request.dtypes]


def study_name(fp: Fingerprint, collective: str, dtype: str, bucket: Bucket, sweep: Sweep,
               counts: str | None = None) -> str:
    # The probe sizes are in the name: a study's scores compare only when
    # measured at the same sizes (before probes, at the lower edge alone);
    # so is a variable collective's counts distribution (its calls' shape).
    probes = ",".join(format_bytes(n) for n in bucket.probe_bytes)
    shape = f"/counts-{counts}" if counts else ""
    return (f"purlin/{fp.gpu_type}/{fp.layout}/{collective}/{dtype}{shape}/{bucket.label}/at-{probes}"
            f"/space-{sweep.space_digest}")


def check_targets(request: TuneRequest) -> None:
    """Before any study: every plan this tune will write can be written there
    (not a folder; its folder not a file), and none it would replace comes
    from another sweep (a quick tune must not silently replace a default
    one's plan; --force says it may)."""
    for job in plan_jobs(request):
        fp = make(backend_class(request.backend), job.ranks, request.gpus).fingerprint()
        path = plan_path(request.out_dir, fp.gpu_type, job.spec.name, fp.layout, job.dtype, job.counts)
        why = writable_refusal(path)
        if why:
            raise PurlinError(f"cannot write the plan {path}: {why}")
        if request.force or not path.is_file():
            continue
        try:
            previous = load_plan_file(path, job.spec)
        except PurlinError:
            continue  # unreadable: replaced, with a note, as _previous_plan says
        if previous.sweep.name != request.sweep.name:
            raise PurlinError(f"{path} holds a plan from sweep '{previous.sweep.name}', this tune's sweep is "
                              f"'{request.sweep.name}': --force to replace it, or --out for another folder")


def run_tune(request: TuneRequest, reporter: Reporter, storage: object | None = None) -> list[JobResult]:
    """Tune every job of ``request``; ``storage`` is an opened study storage
    (default: opened from ``request.storage_url``)."""
    check_targets(request)
    storage = storage if storage is not None else open_storage(request.storage_url)
    try:
        return [_run_job(request, job, storage, reporter) for job in plan_jobs(request)]
    except storage_errors() as exc:
        raise lost_storage(request.storage_url, exc) from None


def _run_job(request: TuneRequest, job: Job, storage: object, reporter: Reporter) -> JobResult:
    backend = make(backend_class(request.backend), job.ranks, request.gpus)
    fp = backend.fingerprint()
    path = plan_path(request.out_dir, fp.gpu_type, job.spec.name, fp.layout, job.dtype, job.counts)
    previous = _previous_plan(path, job.spec, reporter)
    names = [study_name(fp, job.spec.name, job.dtype, b, request.sweep, job.counts) for b in request.sweep.buckets]
    # Before any kernel is built: a complete plan costs a rerun nothing.
    done = None if request.force else _complete(previous, request, job, fp.layout, names)
    if done is not None:
        result = JobResult(job, path, done, up_to_date=True)
        reporter.job_up_to_date(result)
        return result
    bench = ServiceBench(MeasurementService(backend), job.spec, job.dtype, counts=job.counts or "uniform")
    started = time.monotonic()
    variants = bench.warm_up()
    if variants:
        reporter.note(f"{job.spec.name} {job.dtype}: {variants} kernel variants ready in "
                      f"{time.monotonic() - started:.1f} s, before the studies' clocks start")
    previous_entries = {e.min_bytes: e.config for e in previous.entries} if previous else {}
    tuning = _JobTuning(request, job, fp, bench, previous_entries, storage, reporter)
    results = tuple(tuning.bucket(b) for b in request.sweep.buckets)
    entries = tuple(r.entry for r in results if r.entry is not None)
    if not entries:
        return JobResult(job, None, results)
    artifact = PlanArtifact(
        collective=job.spec.name,
        dtype=job.dtype,
        redop=job.spec.redop,
        counts=job.counts,
        ranks=job.ranks,
        backend=request.backend,
        fingerprint=fp,
        package_version=purlin_bench.__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        sweep=SweepRef(request.sweep.name, request.sweep.digest, request.settings.sampler, request.settings.trials,
                       request.settings.seed),
        entries=entries,
    )
    # Written once every bucket is done: an interrupted tune leaves the old plan whole.
    write_plan(artifact, path, job.spec)
    return JobResult(job, path, results)


@dataclass(frozen=True)
class _JobTuning:
    """Everything one job's studies share."""

    request: TuneRequest
    job: Job
    fp: Fingerprint
    bench: ServiceBench
    previous: dict[int, RunConfig]  # previous plan's winners by bucket lower edge
    storage: object
    reporter: Reporter

    def bucket(self, bucket: Bucket) -> BucketResult:
        job, request, bench = self.job, self.request, self.bench
        name = study_name(self.fp, job.spec.name, job.dtype, bucket, request.sweep, job.counts)
        inst = bench.instance(bucket)
        space = request.sweep.space
        spec = StudySpec(
            name=name,
            bucket=bucket,
            space=space,
            context={"op": inst.op, "collective": job.spec.name, "dtype": job.dtype, "ranks": job.ranks,
                     "backend": request.backend},
            normalize=partial(effective_config, exec_params=backend_class(request.backend).params,
                              variable=job.spec.variable),
            default=bench.service.default_config(inst),
            previous=self.previous.get(bucket.min_bytes),
        )
        bench.prime(spec.default, bucket)
        kept = _finished_in_storage(self.storage, name)
        if kept:
            self.reporter.study_resumed(name, bucket, kept, request.settings.trials)
        self.reporter.study_started(name)
        outcome = run_study(spec, bench.measure, bench.check, self.storage, request.settings, on_trial=lambda s,
                            r: self.reporter.trial_finished(s.name, r))
        self.reporter.study_finished(name, outcome)
        best = outcome.best
        if best is None or best.config is None or best.time_us is None:
            self.reporter.note(f"{job.spec.name} {job.dtype} {bucket.label}: no correct configuration in "
                               f"{outcome.finished} trial(s); bucket left out of the plan")
            result = BucketResult(job, self.fp.layout, bucket, outcome, None)
            self.reporter.bucket_done(result)
            return result
        measured = outcome.default is not None and outcome.default.time_us is not None
        default = outcome.default.config if measured else None
        ranked = [r.config for r in outcome.ranked if r.config is not None]
        final = pick(bench, bucket, ranked, default, request.settings.confirm_rounds)
        config, time_us, default_us = final.config, final.time_us, final.default_us
        if final.note:
            self.reporter.note(f"{job.spec.name} {job.dtype} {bucket.label}: kept "
                               f"{'the default' if config == default else config.text()}: {final.note}")
        entry = PlanEntry(
            min_bytes=bucket.min_bytes,
            max_bytes=bucket.max_bytes,
            measured_bytes=bench.nbytes(bucket),
            config=config,
            time_us=time_us,
            busbw_gbps=bench.busbw_gbps(bucket, time_us),
            default_time_us=default_us,
            baseline_time_us=bench.baseline(bucket),
            trials=outcome.finished,
            study=name,
        )
        result = BucketResult(job, self.fp.layout, bucket, outcome, entry)
        self.reporter.bucket_done(result)
        return result


def _previous_plan(path: Path, spec: CollectiveSpec, reporter: Reporter) -> PlanArtifact | None:
    """The plan already at ``path``, whose winners are enqueued again; an
    unreadable previous plan is noted and replaced, not fatal."""
    if not path.exists():
        return None
    try:
        return load_plan_file(path, spec)
    except PurlinError as exc:
        reporter.note(f"ignoring the previous plan: {exc}")
        return None


def _complete(plan: PlanArtifact | None, request: TuneRequest, job: Job, layout: str,
              names: list[str]) -> tuple[BucketResult, ...] | None:
    """The plan's buckets, if it answers this request already: one entry per
    bucket from the very study this request would run (same bucket, probes and
    space), each with the trials asked for. Then rerunning would only measure
    the finalists again and rewrite the same plan."""
    if plan is None or len(plan.entries) != len(names):
        return None
    results = []
    for bucket, name, entry in zip(request.sweep.buckets, names, plan.entries):
        if entry.study != name or entry.trials < request.settings.trials:
            return None
        outcome = StudyOutcome(name, bucket, None, None, entry.trials, request.settings.trials, 0, 0, (), "done")
        results.append(BucketResult(job, layout, bucket, outcome, entry))
    return tuple(results)


def _finished_in_storage(storage: object, name: str) -> int:
    """Finished trials the study ``name`` already holds (0 for a new study)."""
    import optuna  # here, not at import: the plain CLI must start fast

    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:  # no such study yet
        return 0
    return count_finished(study.get_trials(deepcopy=False))
