"""The tuner core: one Optuna study for one size bucket of one (GPU type,
rank layout, collective, dtype), with every measurement injected.

``run_study`` takes ``measure(config, bucket) -> µs`` and
``check(config, bucket) -> bool | CheckResult`` callables, so its logic is
tested with fakes, and the same code drives the numpy reference and the GPU
(see tune.measure). Its rules:

* **Checked before timed.** A trial's configuration is checked against the
  reference first; wrong outputs fail the trial with reason "wrong results"
  and it is never timed, so a fast wrong configuration cannot win.
* **Invalid is data, not a crash.** Any PurlinError from planning or running
  (strategy not applicable, bad parameter, compile error, launch refused, out
  of resources) fails the trial with the reason in its ``failure`` user
  attribute; the study goes on. Other exceptions are bugs and propagate.
* **Default and previous winner first.** The untuned default and the previous
  plan's winner are enqueued before anything is sampled, so trial 0 is the
  default and every plan records what tuning gained over it.
* **Repeats are not re-measured.** Trials are keyed by their *effective*
  configuration (tune.effective); a trial whose key matches a finished trial
  reuses that trial's value (or failure) and records ``duplicate_of``. It still
  counts as a trial: the sampler asked for it.
* **Exactly N trials.** ``trials`` is the total of finished trials wanted in
  the study (COMPLETE, plus FAIL with a recorded reason), across restarts and
  across workers sharing the storage. A trial runs only after claiming one of
  the remaining slots (see ``_Objective._claim``); a trial that finds none is
  pruned and its worker stops. Trials of dead workers are failed as
  ``interrupted`` and do not count, so their slots are run again.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from purlin_bench.config import RunConfig
from purlin_bench.errors import PurlinError
from purlin_bench.tune import liveness
from purlin_bench.tune.space import Space
from purlin_bench.tune.sweep import Bucket

SAMPLERS = ("tpe", "random", "bruteforce")

# Trial user attributes (the study's record of every decision).
ATTR_CONFIG = "config"  # the effective configuration, as RunConfig.to_dict()
ATTR_FAILURE = "failure"  # why the configuration is invalid; FAIL trials with it count
ATTR_ROLE = "role"  # "default" or "previous" for the enqueued trials
ATTR_FIXED = "fixed_config"  # the enqueued configuration, run verbatim
ATTR_DUPLICATE = "duplicate_of"  # number of the finished trial whose result was reused
ATTR_WORKER = "worker"  # who ran it (tune.liveness)
ATTR_CLAIMED = "claimed"  # holds a slot of the trial budget while RUNNING
ATTR_INTERRUPTED = "interrupted"  # its worker died; FAIL, not counted
ATTR_SKIPPED = "skipped"  # pruned without running: no slot left

ROLE_DEFAULT = "default"
ROLE_PREVIOUS = "previous"
WRONG_RESULTS = "wrong results"

Measure = Callable[[RunConfig, Bucket], float]
Check = Callable[[RunConfig, Bucket], Any]  # bool, or an object with .ok (CheckResult)


class Rejected(Exception):
    """A configuration failed its check or could not be planned or run; the
    trial is marked FAIL with the reason (caught by the study, not fatal)."""


@dataclass(frozen=True)
class StudySpec:
    """What one study tunes."""

    name: str
    bucket: Bucket
    space: Space
    context: Mapping[str, Any]  # names conditions may read: op, collective, dtype, ranks, backend
    normalize: Callable[[RunConfig], RunConfig]  # sampled -> effective configuration
    default: RunConfig | None = None
    previous: RunConfig | None = None


@dataclass(frozen=True)
class TuneSettings:
    trials: int
    sampler: str = "tpe"
    seed: int | None = None
    timeout_s: float | None = None  # per study: no new trial starts after it
    poll_s: float = 0.5  # while waiting for other workers' last trials
    confirm_rounds: int = 3  # re-measure the finalists this often before picking (0: take the study's best)


@dataclass(frozen=True)
class TrialResult:
    number: int
    config: RunConfig | None
    time_us: float | None
    failure: str | None
    role: str | None
    duplicate_of: int | None


@dataclass(frozen=True)
class StudyOutcome:
    name: str
    bucket: Bucket
    best: TrialResult | None  # fastest correct configuration
    default: TrialResult | None  # the default configuration's trial, if it ran
    finished: int  # trials counted towards the budget, in storage
    wanted: int
    ran: int  # trials this call finished
    measured: int  # measure() calls this call made
    failures: tuple[TrialResult, ...]
    stop: str  # "done", "timeout" or "exhausted" (the sampler ran out of configurations)
    ranked: tuple[TrialResult, ...] = ()  # correct trials, fastest first, one per configuration


OnTrial = Callable[[StudySpec, TrialResult], None]


def run_study(spec: StudySpec, measure: Measure, check: Check, storage: Any, settings: TuneSettings, on_trial: OnTrial | None = None) -> StudyOutcome:
    """Run (or resume, or join) the study ``spec.name`` in ``storage`` until it
    holds ``settings.trials`` finished trials, the timeout passes, or the
    sampler has no configuration left."""
    import optuna  # here, not at import: the plain CLI must start fast

    if settings.trials < 1:
        raise PurlinError(f"trials must be >= 1, got {settings.trials}")
    with _quiet(optuna):
        study = optuna.create_study(
            study_name=spec.name,
            storage=storage,
            sampler=make_sampler(settings.sampler, seed_for(spec.name, settings.seed), settings.trials),
            direction="minimize",
            load_if_exists=True,
        )
        reap_interrupted(study, storage)
        _enqueue_first(study, spec)
        deadline = time.monotonic() + settings.timeout_s if settings.timeout_s else None
        objective = _Objective(spec, measure, check, settings, storage, deadline)
        if count_finished(study.get_trials(deepcopy=False)) < settings.trials:
            study.optimize(
                objective,
                timeout=settings.timeout_s,
                catch=(Rejected,),
                callbacks=[_AfterTrial(spec, settings.trials, objective, on_trial)],
                gc_after_trial=False,
            )
        return _outcome(spec, study.get_trials(deepcopy=False), settings, objective, deadline)


def make_sampler(name: str, seed: int | None, trials: int = 32) -> Any:
    import optuna

    if name == "tpe":
        # Few random start-up trials when the budget is small, so TPE gets to model.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(2, min(10, trials // 3)), constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "bruteforce":
        return optuna.samplers.BruteForceSampler(seed=seed)
    raise PurlinError(f"unknown sampler '{name}' (known: {', '.join(SAMPLERS)})")


def seed_for(study_name: str, seed: int | None) -> int | None:
    """One seed per study, stable across runs, different between studies."""
    return None if seed is None else (seed * 1_000_003 + zlib.crc32(study_name.encode())) % 2**32


def is_counted(trial: Any) -> bool:
    """Finished trials that count towards the budget: COMPLETE, or FAIL with a
    recorded reason (an invalid configuration). Interrupted trials do not."""
    from optuna.trial import TrialState

    return trial.state == TrialState.COMPLETE or (trial.state == TrialState.FAIL and ATTR_FAILURE in trial.user_attrs)


def count_finished(trials: list[Any]) -> int:
    return sum(1 for t in trials if is_counted(t))


def reap_interrupted(study: Any, storage: Any) -> None:
    """Fail the RUNNING trials of workers that died on this host (see
    tune.liveness) and enqueue their configurations again, then fail those
    whose heartbeat went stale (other hosts; the storage re-enqueues them,
    see tune.storage)."""
    import optuna
    from optuna.trial import TrialState

    dead = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if liveness.is_gone(t.user_attrs.get(ATTR_WORKER))]
    if dead:
        study_id = storage.get_study_id_from_name(study.study_name)
        for t in dead:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
            try:
                storage.set_trial_user_attr(trial_id, ATTR_INTERRUPTED, True)
                storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another worker got there first (and re-enqueued it)
            requeue(study, t)
    optuna.storages.fail_stale_trials(study)


def requeue(study: Any, trial: Any) -> None:
    """Enqueue an interrupted trial's configuration again: it never finished,
    and samplers that remember what they tried (bruteforce) would skip it."""
    if trial.params or ATTR_FIXED in trial.user_attrs:
        keep = {k: trial.user_attrs[k] for k in (ATTR_ROLE, ATTR_FIXED) if k in trial.user_attrs}
        study.enqueue_trial(dict(trial.params), user_attrs=keep)


def _enqueue_first(study: Any, spec: StudySpec) -> None:
    """Enqueue the default, then the previous winner, unless the study already
    holds (or is about to run) a trial of that role. Enqueued trials run their
    configuration verbatim; their parameters are recorded where the space
    can express them, so the sampler learns from them too."""
    from optuna.trial import TrialState

    live = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE)
    roles = {t.user_attrs.get(ATTR_ROLE) for t in study.get_trials(deepcopy=False) if t.state in live or is_counted(t)}
    default = spec.normalize(spec.default) if spec.default else None
    previous = spec.normalize(spec.previous) if spec.previous else None
    if previous is not None and previous == default:
        previous = None
    for role, config in ((ROLE_DEFAULT, default), (ROLE_PREVIOUS, previous)):
        if config is None or role in roles:
            continue
        study.enqueue_trial(spec.space.params_of(config, spec.context), user_attrs={ATTR_ROLE: role, ATTR_FIXED: config.to_dict()})


class _Objective:
    def __init__(self, spec: StudySpec, measure: Measure, check: Check, settings: TuneSettings, storage: Any, deadline: float | None):
        self.spec = spec
        self.measure = measure
        self.check = check
        self.settings = settings
        self.storage = storage
        self.deadline = deadline
        self.measured = 0
        self.ran = 0

    def __call__(self, trial: Any) -> float:
        try:
            return self._run(trial)
        except KeyboardInterrupt:
            # Optuna fails the trial and re-raises; mark it and queue its
            # configuration again, as for a worker that died.
            trial.set_user_attr(ATTR_INTERRUPTED, True)
            requeue(trial.study, trial)
            raise

    def _run(self, trial: Any) -> float:
        import optuna

        trial.set_user_attr(ATTR_WORKER, liveness.this_worker())
        if not self._claim(trial):
            trial.set_user_attr(ATTR_SKIPPED, "no trial left in the budget")
            trial.study.stop()
            raise optuna.TrialPruned()
        config = self._config(trial)
        trial.set_user_attr(ATTR_CONFIG, config.to_dict())
        twin = self._finished_twin(trial, config)
        if twin is not None:
            trial.set_user_attr(ATTR_DUPLICATE, twin.number)
            if twin.state == optuna.trial.TrialState.COMPLETE:
                return float(twin.value)
            raise self._rejected(trial, twin.user_attrs[ATTR_FAILURE])
        return self._evaluate(trial, config)

    def _claim(self, trial: Any) -> bool:
        """Take one of the budget's remaining slots, or learn there is none.

        A claim is the ``claimed`` attribute written (and committed) *before*
        the study is read, so of two trials claiming at once at least one sees
        the other. A trial goes ahead only if the finished trials plus every
        other claimed RUNNING trial leave a slot; otherwise it withdraws its
        claim and waits (randomised, so two contenders do not collide again)
        until a slot frees (a claimed trial was interrupted) or the budget is
        met. Hence never more than ``trials`` finished trials, in any
        interleaving of any number of workers."""
        from optuna.trial import TrialState

        study = trial.study
        while True:
            trial.set_user_attr(ATTR_CLAIMED, True)
            trials = study.get_trials(deepcopy=False)
            finished = count_finished(trials)
            others = sum(1 for t in trials if t.state == TrialState.RUNNING and t.number != trial.number and t.user_attrs.get(ATTR_CLAIMED))
            if finished + others < self.settings.trials:
                return True
            trial.set_user_attr(ATTR_CLAIMED, False)
            if finished >= self.settings.trials or (self.deadline is not None and time.monotonic() > self.deadline):
                return False
            time.sleep(self.settings.poll_s * random.uniform(0.5, 1.5))
            reap_interrupted(study, self.storage)

    def _config(self, trial: Any) -> RunConfig:
        sampled = self.spec.space.suggest(trial, self.spec.context)
        fixed = trial.user_attrs.get(ATTR_FIXED)
        return self.spec.normalize(RunConfig.from_dict(fixed) if fixed else sampled)

    def _finished_twin(self, trial: Any, config: RunConfig) -> Any:
        """The first counted trial that ran the same effective configuration."""
        wanted = config.to_dict()
        for t in trial.study.get_trials(deepcopy=False):
            if t.number != trial.number and is_counted(t) and t.user_attrs.get(ATTR_CONFIG) == wanted:
                return t
        return None

    def _evaluate(self, trial: Any, config: RunConfig) -> float:
        bucket = self.spec.bucket
        try:
            verdict = self.check(config, bucket)
        except PurlinError as exc:
            raise self._rejected(trial, _one_line(exc)) from None
        ok, detail = _verdict(verdict)
        if not ok:
            raise self._rejected(trial, WRONG_RESULTS + detail)
        try:
            value = float(self.measure(config, bucket))
        except PurlinError as exc:
            raise self._rejected(trial, _one_line(exc)) from None
        self.measured += 1
        if not math.isfinite(value) or value <= 0:
            raise self._rejected(trial, f"measurement is not a positive time: {value}")
        return value

    def _rejected(self, trial: Any, reason: str) -> Rejected:
        """Record why the trial's configuration is invalid; raise the result."""
        trial.set_user_attr(ATTR_FAILURE, reason)
        return Rejected(reason)


class _AfterTrial:
    """Optuna callback: report each finished trial, stop at the budget."""

    def __init__(self, spec: StudySpec, trials: int, objective: _Objective, on_trial: OnTrial | None):
        self.spec = spec
        self.trials = trials
        self.objective = objective
        self.on_trial = on_trial

    def __call__(self, study: Any, frozen: Any) -> None:
        if is_counted(frozen):
            self.objective.ran += 1
            if self.on_trial is not None:
                self.on_trial(self.spec, _result(frozen))
        if count_finished(study.get_trials(deepcopy=False)) >= self.trials:
            study.stop()


def _verdict(verdict: Any) -> tuple[bool, str]:
    if isinstance(verdict, bool):
        return verdict, ""
    ok = bool(getattr(verdict, "ok", verdict))
    wrong, total = getattr(verdict, "wrong", None), getattr(verdict, "total", None)
    detail = f": {wrong} of {total} output elements differ from the reference" if wrong is not None and total is not None else ""
    return ok, detail


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _result(t: Any) -> TrialResult:
    config = t.user_attrs.get(ATTR_CONFIG)
    return TrialResult(
        number=t.number,
        config=RunConfig.from_dict(config) if config else None,
        time_us=float(t.value) if t.value is not None else None,
        failure=t.user_attrs.get(ATTR_FAILURE),
        role=t.user_attrs.get(ATTR_ROLE),
        duplicate_of=t.user_attrs.get(ATTR_DUPLICATE),
    )


def _outcome(spec: StudySpec, trials: list[Any], settings: TuneSettings, objective: _Objective, deadline: float | None) -> StudyOutcome:
    from optuna.trial import TrialState

    counted = [_result(t) for t in sorted(trials, key=lambda t: t.number) if is_counted(t)]
    complete = [r for r in counted if r.time_us is not None and r.config is not None]
    ranked: list[TrialResult] = []
    seen: set[RunConfig] = set()
    for r in sorted(complete, key=lambda r: (r.time_us, r.number)):
        if r.config not in seen:
            seen.add(r.config)
            ranked.append(r)
    best = ranked[0] if ranked else None
    default_config = spec.normalize(spec.default) if spec.default else None
    default = next((r for r in counted if default_config is not None and r.config == default_config), None)
    finished = len(counted)
    if finished >= settings.trials:
        stop = "done"
    elif deadline is not None and time.monotonic() >= deadline:
        stop = "timeout"
    elif any(t.state == TrialState.RUNNING for t in trials):
        stop = "done"  # other workers are finishing the last trials
    else:
        stop = "exhausted"
    return StudyOutcome(
        name=spec.name,
        bucket=spec.bucket,
        best=best,
        default=default,
        finished=finished,
        wanted=settings.trials,
        ran=objective.ran,
        measured=objective.measured,
        failures=tuple(r for r in counted if r.failure is not None),
        stop=stop,
        ranked=tuple(ranked),
    )


@dataclass(frozen=True)
class Confirmed:
    """The winner after re-measuring the finalists side by side."""

    config: RunConfig
    time_us: float  # median of the confirmation rounds
    default_time_us: float | None  # the default's, from the same rounds
    times_us: Mapping[str, float]  # every finalist's median, by configuration text


def confirm_winner(outcome: StudyOutcome, measure: Measure, finalists: int = 3, rounds: int = 3, margin: float = 0.02) -> Confirmed | None:
    """Re-measure the study's fastest ``finalists`` and the default in
    ``rounds`` interleaved rounds and pick by median.

    A study ranks each configuration by one measurement, so its best is
    partly the luckiest draw, and a plan must not lose to the default it
    replaces. The default therefore stays unless a finalist beats it by more
    than ``margin`` in the same rounds."""
    default = outcome.default.config if outcome.default is not None and outcome.default.time_us is not None else None
    candidates = [r.config for r in outcome.ranked[:finalists] if r.config is not None]
    if default is not None and default not in candidates:
        candidates.append(default)
    if not candidates:
        return None
    samples: dict[RunConfig, list[float]] = {c: [] for c in candidates}
    for _ in range(max(1, rounds)):
        for config in candidates:
            try:
                value = float(measure(config, outcome.bucket))
            except PurlinError:
                continue  # measured fine in its trial; a flaky re-run just drops this sample
            if math.isfinite(value) and value > 0:
                samples[config].append(value)
    medians = {c: statistics.median(v) for c, v in samples.items() if v}
    if not medians:
        return None
    best = min(medians, key=lambda c: (medians[c], candidates.index(c)))
    default_time = medians.get(default) if default is not None else None
    if default_time is not None and default_time <= medians[best] * (1 + margin):
        best = default
    return Confirmed(best, medians[best], default_time, {c.text(): t for c, t in medians.items()})


@contextlib.contextmanager
def _quiet(optuna: Any) -> Iterator[None]:
    """Optuna logs every trial and warns about experimental features; the
    tuner reports through its own callback and records failures as data."""
    # Also a lasting filter for the experimental APIs this module calls itself
    # (heartbeat, samplers' options): catch_warnings alone is not thread-safe.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning, module=r"purlin_bench\.tune\.")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(verbosity)
