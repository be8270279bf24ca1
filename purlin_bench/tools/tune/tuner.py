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
  across workers sharing the storage. Dead workers are Optuna's business: the
  storage's heartbeat fails their RUNNING trials once stale (a FAIL with no
  reason, so it does not count) and ``retry_stale`` queues each again with its
  parameters (tune.storage). The one rule of our own is the slot check at a
  trial's start (``_Objective._slot``), which Optuna has no equivalent of.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import socket
import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from purlin_bench.base.config import RunConfig
from purlin_bench.procs.errors import DistError
from purlin_bench.base.errors import PurlinError
from purlin_bench.tools.tune.space import Space
from purlin_bench.tools.tune.sweep import Bucket

SAMPLERS = ("tpe", "random", "bruteforce")

# Trial user attributes (the study's record of every decision).
ATTR_CONFIG = "config"  # the effective configuration, as RunConfig.to_dict()
ATTR_FAILURE = "failure"  # why the configuration is invalid; FAIL trials with it count
ATTR_ROLE = "role"  # "default" or "previous" for the enqueued trials
ATTR_FIXED = "fixed_config"  # the enqueued configuration, run verbatim
ATTR_DUPLICATE = "duplicate_of"  # number of the finished trial whose result was reused
ATTR_WORKER = "worker"  # {host, pid} that ran it: a record, to tell workers of one study apart

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
    poll_s: float = 0.5  # while only RUNNING trials (other workers', dead ones going stale) stand before the budget
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


def run_study(
    spec: StudySpec,
    measure: Measure,
    check: Check,
    storage: Any,
    settings: TuneSettings,
    on_trial: OnTrial | None = None,
) -> StudyOutcome:
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
        # Before the roles are read: a default trial whose worker died is
        # queued again by its retry, not enqueued a second time.
        optuna.storages.fail_stale_trials(study)
        _enqueue_first(study, spec)
        deadline = time.monotonic() + settings.timeout_s if settings.timeout_s else None
        objective = _Objective(spec, measure, check, settings)
        after = _AfterTrial(spec, settings.trials, objective, on_trial)
        # A round of optimize ends at the budget, the timeout, when the
        # sampler is exhausted, or when a trial finds no slot left. Then the
        # RUNNING trials of others decide: they finish, or (dead) go stale and
        # are queued again; queued trials, or slots freed, start another round.
        while count_finished(study.get_trials(deepcopy=False)) < settings.trials:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            objective.blocked = False
            study.optimize(objective, timeout=left, catch=(Rejected,), callbacks=[after], gc_after_trial=False)
            then = _settle(study, settings, deadline)
            if then == "stop" or (then == "idle" and not objective.blocked):
                break
        return _outcome(spec, study.get_trials(deepcopy=False), settings, objective, deadline)


def _settle(study: Any, settings: TuneSettings, deadline: float | None) -> str:
    """Wait while only RUNNING trials stand between the study and its budget:
    "stop" (budget met or timeout), "queued" (trials to run) or "idle"."""
    import optuna
    from optuna.trial import TrialState

    while True:
        trials = study.get_trials(deepcopy=False)
        if count_finished(trials) >= settings.trials or (deadline is not None and time.monotonic() >= deadline):
            return "stop"
        states = {t.state for t in trials}
        if TrialState.WAITING in states:
            return "queued"
        if TrialState.RUNNING not in states:
            return "idle"
        time.sleep(settings.poll_s)
        optuna.storages.fail_stale_trials(study)


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


def retry_stale(study: Any, trial: Any) -> None:
    """Queue a trial whose worker stopped mid-trial again, with its parameters:
    the storage's heartbeat callback (tune.storage), and ours on Ctrl-C. It
    never finished, and samplers that remember what they tried (bruteforce
    counts FAIL as tried) would not sample it again."""
    if ATTR_FAILURE in trial.user_attrs:
        return  # its worker died after recording it invalid: that result stands, and counts
    # Only what chose the configuration carries over; what the dead run
    # recorded (config, worker, duplicate_of) the retry writes afresh.
    trial = copy.copy(trial)
    trial.user_attrs = {k: v for k, v in trial.user_attrs.items() if k in (ATTR_ROLE, ATTR_FIXED)}
    _retry_callback()(study, trial)


def _retry_callback() -> Any:
    import optuna

    # Three deaths in a row of one configuration (a crash, not bad luck) and
    # it is given up: its slot goes to a fresh sample instead of killing every rerun.
    return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)


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
        study.enqueue_trial(
            spec.space.params_of(config, spec.context), user_attrs={ATTR_ROLE: role, ATTR_FIXED: config.to_dict()}
        )


class _Objective:
    def __init__(self, spec: StudySpec, measure: Measure, check: Check, settings: TuneSettings):
        self.spec = spec
        self.measure = measure
        self.check = check
        self.settings = settings
        self.measured = 0
        self.ran = 0
        self.blocked = False  # this round ended on a trial that found no slot

    def __call__(self, trial: Any) -> float:
        try:
            return self._run(trial)
        except KeyboardInterrupt:
            # Optuna fails the trial (no reason: not counted) and re-raises;
            # queue it again as for a worker that died.
            retry_stale(
                trial.study, next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)
            )
            raise

    def _run(self, trial: Any) -> float:
        import optuna

        if not self._slot(trial):
            trial.study.stop()
            raise optuna.TrialPruned()
        trial.set_user_attr(ATTR_WORKER, {"host": socket.gethostname(), "pid": os.getpid()})
        config = self._config(trial)
        trial.set_user_attr(ATTR_CONFIG, config.to_dict())
        twin = self._finished_twin(trial, config)
        if twin is not None:
            trial.set_user_attr(ATTR_DUPLICATE, twin.number)
            if twin.state == optuna.trial.TrialState.COMPLETE:
                return float(twin.value)
            raise self._rejected(trial, twin.user_attrs[ATTR_FAILURE])
        return self._evaluate(trial, config)

    def _slot(self, trial: Any) -> bool:
        """Whether this trial may run: the finished trials, the RUNNING trials
        numbered below it and the queued ones leave a slot of the budget.

        MaxTrialsCallback cannot: it counts by state (a FAIL counts here only
        with a reason), and after a trial, so a worker finishing the last slot
        but one starts another while a second worker fills it. With two
        workers, a budget of 16 and 0.1 s trials, that check ended with 17 in
        5 of 6 studies on PostgreSQL, 3 of 4 on SQLite; this one with 16 in
        all. RDBStorage numbers trials under a lock on the study, and a trial
        is RUNNING before it gets here, so the highest-numbered of any N+1
        sees the other N; the lowest-numbered RUNNING one is held up by none."""
        from optuna.trial import TrialState

        trials = trial.study.get_trials(deepcopy=False)
        ahead = sum(1 for t in trials if t.state == TrialState.RUNNING and t.number < trial.number)
        queued = sum(1 for t in trials if t.state == TrialState.WAITING)
        self.blocked = count_finished(trials) + ahead + queued >= self.settings.trials
        return not self.blocked

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
        except DistError:
            raise  # a lost rank ends the run, not one trial
        except PurlinError as exc:
            raise self._rejected(trial, _one_line(exc)) from None
        ok, detail = _verdict(verdict)
        if not ok:
            raise self._rejected(trial, WRONG_RESULTS + detail)
        try:
            value = float(self.measure(config, bucket))
        except DistError:
            raise  # a lost rank ends the run, not one trial
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
    detail = (
        f": {wrong} of {total} output elements differ from the reference"
        if wrong is not None and total is not None
        else ""
    )
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


def _outcome(
    spec: StudySpec, trials: list[Any], settings: TuneSettings, objective: _Objective, deadline: float | None
) -> StudyOutcome:
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
