"""The tuner core with fake measure/check callables (as Triton tests its
autotuner): the fastest correct configuration wins, a fast wrong one never
does, the default and the previous winner run first, repeats are not
re-measured, invalid configurations are data, and the trial count is exact."""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from functools import partial

import optuna
import pytest

from purlin_bench.measure.compare import CheckResult
from purlin_bench.base.config import RunConfig
from purlin_bench.base.errors import ExecutionError, ProgramError, PurlinError
from purlin_bench.tools.tune.effective import effective_config
from purlin_bench.tools.tune.storage import open_storage
from purlin_bench.tools.tune.sweep import Bucket, parse_sweep
from purlin_bench.tools.tune.tuner import (
    ATTR_CONFIG,
    ATTR_DUPLICATE,
    ATTR_FAILURE,
    ATTR_FIXED,
    ATTR_ROLE,
    ATTR_WORKER,
    StudySpec,
    TuneSettings,
    count_finished,
    run_study,
)

SPACE = parse_sweep(
    {
        "sizes": [8],
        "space": {
            "strategy": ["direct", "push", "two-shot", "ring"],
            "params": {
                "channels": [1, 2],
                "datapath": ["sm", "ce"],
                "blocks": {"values": [0, 4], "when": {"datapath": "sm"}},
            },
        },
    },
    "fake.yaml",
).space
BUCKET = Bucket(8, None)
NUMPY_LIKE = partial(effective_config, exec_params=())  # a backend without datapath parameters
BASE_US = {"push": 1.0, "ring": 5.0, "direct": 10.0, "two-shot": 20.0}


class Fakes:
    """check/measure fakes that record every call."""

    def __init__(self, wrong=(), invalid=None, refused=None, delay_s=0.0):
        self.wrong = set(wrong)
        self.invalid = dict(invalid or {})  # strategy -> reason raised by check (planning)
        self.refused = dict(refused or {})  # strategy -> reason raised by measure (launch)
        self.delay_s = delay_s
        self.checked: list[RunConfig] = []
        self.measured: list[RunConfig] = []
        self.lock = threading.Lock()

    def check(self, config: RunConfig, bucket: Bucket):
        with self.lock:
            self.checked.append(config)
        if config.strategy in self.invalid:
            raise ProgramError(self.invalid[config.strategy])
        return config.strategy not in self.wrong

    def measure(self, config: RunConfig, bucket: Bucket) -> float:
        with self.lock:
            self.measured.append(config)
        if config.strategy in self.refused:
            raise ExecutionError(self.refused[config.strategy])
        if self.delay_s:
            time.sleep(self.delay_s)
        return BASE_US[config.strategy] + 0.1 * dict(config.plan_params).get("channels", 1)


def spec(name="s", default=None, previous=None, normalize=NUMPY_LIKE, space=SPACE) -> StudySpec:
    return StudySpec(name, BUCKET, space, {"op": "reduce"}, normalize, default=default, previous=previous)


def trials_of(storage, name="s"):
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


@pytest.fixture
def storage():
    return optuna.storages.InMemoryStorage()


def test_winner_is_the_fastest_correct_configuration(storage):
    fakes = Fakes()
    out = run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=60, sampler="bruteforce", seed=0))
    assert out.best.config == RunConfig.make("push", {"channels": 1, "slice_bytes": 0})
    assert out.best.time_us == pytest.approx(1.1)
    assert out.stop == "exhausted"  # the space (12 sampled configurations) ran out before 60


def test_fast_but_wrong_never_wins_and_is_never_timed(storage):
    fakes = Fakes(wrong={"push"})
    out = run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=30, sampler="random", seed=1))
    assert out.best.config.strategy == "ring"
    assert any(c.strategy == "push" for c in fakes.checked), "the sampler should have tried push"
    assert not any(c.strategy == "push" for c in fakes.measured)
    wrong = [t for t in trials_of(storage) if t.state == optuna.trial.TrialState.FAIL]
    assert wrong and all(t.user_attrs[ATTR_FAILURE].startswith("wrong results") for t in wrong)
    assert all(t.user_attrs[ATTR_CONFIG]["strategy"] == "push" for t in wrong)


def test_check_results_give_the_count_of_wrong_elements(storage):
    def check(config, bucket):
        return CheckResult(wrong=3, total=8) if config.strategy == "push" else CheckResult(0, 8)

    fakes = Fakes()
    run_study(spec(), fakes.measure, check, storage, TuneSettings(trials=12, sampler="bruteforce", seed=0))
    reasons = {t.user_attrs.get(ATTR_FAILURE) for t in trials_of(storage)} - {None}
    assert reasons == {"wrong results: 3 of 8 output elements differ from the reference"}


def test_default_and_previous_winner_are_enqueued_first(storage):
    fakes = Fakes()
    default = RunConfig.make("two-shot", {"channels": 1, "slice_bytes": 0})
    previous = RunConfig.make("ring", {"channels": 2})
    out = run_study(
        spec(default=default, previous=previous), fakes.measure, fakes.check, storage, TuneSettings(trials=6, seed=3)
    )
    trials = sorted(trials_of(storage), key=lambda t: t.number)
    assert trials[0].user_attrs[ATTR_ROLE] == "default"
    assert {k: trials[0].params[k] for k in ("strategy", "channels")} == {"strategy": "two-shot", "channels": 1}
    assert trials[1].user_attrs[ATTR_ROLE] == "previous"
    assert {k: trials[1].params[k] for k in ("strategy", "channels")} == {"strategy": "ring", "channels": 2}
    assert fakes.measured[:2] == [NUMPY_LIKE(default), NUMPY_LIKE(previous)]
    assert out.default.number == 0 and out.default.time_us == pytest.approx(20.1)
    # Resuming does not enqueue them again.
    run_study(
        spec(default=default, previous=previous), fakes.measure, fakes.check, storage, TuneSettings(trials=9, seed=3)
    )
    roles = [t.user_attrs.get(ATTR_ROLE) for t in trials_of(storage)]
    assert roles.count("default") == 1 and roles.count("previous") == 1


def test_previous_equal_to_default_is_enqueued_once(storage):
    fakes = Fakes()
    default = RunConfig.make("direct", {"channels": 1, "slice_bytes": 0})
    run_study(
        spec(default=default, previous=RunConfig.make("direct", {"channels": 1})),
        fakes.measure,
        fakes.check,
        storage,
        TuneSettings(trials=3, seed=0),
    )
    assert [t.user_attrs.get(ATTR_ROLE) for t in trials_of(storage)].count("previous") == 0


def test_enqueued_config_outside_the_space_runs_verbatim(storage):
    fakes = Fakes()
    default = RunConfig.make("direct", {"channels": 7})  # 7 is not among the space's channels
    out = run_study(spec(default=default), fakes.measure, fakes.check, storage, TuneSettings(trials=2, seed=0))
    assert fakes.measured[0] == NUMPY_LIKE(default)
    assert out.default.config == NUMPY_LIKE(default)


def test_repeated_configurations_are_not_measured_again(storage):
    fakes = Fakes()
    out = run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=40, sampler="random", seed=5))
    # On a backend without datapath parameters the space holds 4 x 2 = 8 effective
    # configurations, however many datapath values the sampler drew.
    distinct = {c for c in fakes.measured}
    assert len(fakes.measured) == len(distinct) <= 8
    assert out.finished == 40 and out.measured == len(fakes.measured)
    trials = trials_of(storage)
    duplicates = [t for t in trials if ATTR_DUPLICATE in t.user_attrs]
    assert len(duplicates) == 40 - len(distinct)
    by_number = {t.number: t for t in trials}
    for t in duplicates:
        original = by_number[t.user_attrs[ATTR_DUPLICATE]]
        assert original.user_attrs[ATTR_CONFIG] == t.user_attrs[ATTR_CONFIG] and original.value == t.value


def test_datapath_parameters_count_where_the_backend_takes_them(storage):
    fakes = Fakes()
    keep_all = partial(effective_config, exec_params=None)
    run_study(
        spec(normalize=keep_all),
        fakes.measure,
        fakes.check,
        storage,
        TuneSettings(trials=40, sampler="bruteforce", seed=0),
    )
    assert len(set(fakes.measured)) == 4 * 2 * 3  # (sm with 2 block counts) + ce


def test_invalid_configurations_are_recorded_not_fatal(storage):
    fakes = Fakes(invalid={"ring": "out of resources: 99 blocks"}, refused={"direct": "launch refused"})
    out = run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=24, sampler="bruteforce", seed=0))
    reasons = {t.user_attrs[ATTR_CONFIG]["strategy"]: t.user_attrs.get(ATTR_FAILURE) for t in trials_of(storage)}
    assert reasons["ring"] == "out of resources: 99 blocks"
    assert reasons["direct"] == "launch refused"
    assert out.best.config.strategy == "push"
    assert {r.failure for r in out.failures} == {"out of resources: 99 blocks", "launch refused"}
    assert out.finished == 24  # failures count as trials


def test_non_finite_measurement_is_rejected(storage):
    fakes = Fakes()
    out = run_study(
        spec(space=SPACE.restricted(("direct",))),
        lambda c, b: math.nan,
        fakes.check,
        storage,
        TuneSettings(trials=2, seed=0),
    )
    assert out.best is None and out.failures[0].failure.startswith("measurement is not a positive time")


def test_a_bug_in_measure_propagates(storage):
    def broken(config, bucket):
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        run_study(spec(), broken, Fakes().check, storage, TuneSettings(trials=3, seed=0))


def test_trials_is_a_total_across_restarts(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    first = Fakes()
    out = run_study(spec(), first.measure, first.check, url, TuneSettings(trials=5, sampler="random", seed=2))
    assert out.finished == 5 and out.ran == 5
    again = Fakes()
    out = run_study(spec(), again.measure, again.check, url, TuneSettings(trials=9, sampler="random", seed=2))
    assert out.finished == 9 and out.ran == 4
    assert count_finished(trials_of(url)) == 9
    done = Fakes()
    out = run_study(spec(), done.measure, done.check, url, TuneSettings(trials=9, sampler="random", seed=2))
    assert out.ran == 0 and not done.checked


def _orphan(storage, role=None):
    """A RUNNING trial as a worker killed mid-trial leaves it: parameters
    sampled, one heartbeat recorded, then silence."""
    study = optuna.create_study(study_name="s", storage=storage)
    orphan = study.ask()
    orphan.suggest_categorical("strategy", SPACE.strategies)
    if role is not None:
        orphan.set_user_attr(ATTR_ROLE, role)
        orphan.set_user_attr(ATTR_FIXED, RunConfig.make("ring", {"channels": 2}).to_dict())
    orphan.set_user_attr(
        ATTR_CONFIG, NUMPY_LIKE(RunConfig.make("direct", {"channels": 1})).to_dict()
    )  # what the dead run recorded
    storage.record_heartbeat(orphan._trial_id)
    return orphan.number


def _retries_of(trials, number):
    return [t for t in trials if optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == number]


def test_a_stale_trial_is_failed_uncounted_and_retried_with_its_parameters(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 'tune.db'}", heartbeat_s=1, grace_s=1)
    number = _orphan(storage, role="previous")
    time.sleep(2.1)  # its heartbeat is older than the grace when the study starts
    fakes = Fakes()
    out = run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=4, seed=0))
    assert out.finished == 4
    trials = trials_of(storage)
    dead = trials[number]
    assert dead.state == optuna.trial.TrialState.FAIL and ATTR_FAILURE not in dead.user_attrs  # so it is not counted
    (retry,) = _retries_of(trials, number)
    assert retry.state == optuna.trial.TrialState.COMPLETE and retry.params["strategy"] == dead.params["strategy"]
    # It ran as what it was (the previous winner, verbatim), not as what the dead run recorded.
    assert retry.user_attrs[ATTR_ROLE] == "previous" and retry.user_attrs[ATTR_CONFIG]["strategy"] == "ring"
    assert fakes.measured[0] == NUMPY_LIKE(RunConfig.make("ring", {"channels": 2}))


def test_the_last_slot_waits_for_a_dead_trial_and_runs_its_retry(tmp_path):
    """A rerun right after a kill: the killed trial is not stale yet and holds
    the last slot. The rerun neither counts it nor stops short: it waits
    until the heartbeat goes stale, then runs the retry."""
    storage = open_storage(f"sqlite:///{tmp_path / 'tune.db'}", heartbeat_s=1, grace_s=2)
    number = _orphan(storage)
    fakes = Fakes()
    start = time.monotonic()
    out = run_study(
        spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=3, sampler="random", seed=0, poll_s=0.1)
    )
    assert time.monotonic() - start > 2  # it did wait for the grace
    trials = trials_of(storage)
    assert out.finished == 3 and count_finished(trials) == 3
    (retry,) = _retries_of(trials, number)
    assert (
        retry.state == optuna.trial.TrialState.COMPLETE
        and retry.params["strategy"] == trials[number].params["strategy"]
    )
    assert not [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)]


def test_a_trial_recorded_invalid_before_its_worker_died_counts_and_is_not_retried(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 'tune.db'}", heartbeat_s=1, grace_s=1)
    number = _orphan(storage)
    study = optuna.load_study(study_name="s", storage=storage)
    storage.set_trial_user_attr(
        storage.get_trial_id_from_study_id_trial_number(study._study_id, number), ATTR_FAILURE, "launch refused"
    )
    time.sleep(2.1)
    fakes = Fakes()
    run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=3, seed=0))
    trials = trials_of(storage)
    assert count_finished(trials) == 3 and trials[number].state == optuna.trial.TrialState.FAIL
    assert not _retries_of(trials, number) and len(fakes.checked) == 2


def test_ctrl_c_mid_trial_queues_its_configuration_again(storage):
    fakes = Fakes()

    def interrupted(config, bucket):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study(spec(), interrupted, fakes.check, storage, TuneSettings(trials=3, sampler="bruteforce", seed=0))
    cut, queued = sorted(trials_of(storage), key=lambda t: t.number)
    assert cut.state == optuna.trial.TrialState.FAIL and ATTR_FAILURE not in cut.user_attrs
    assert queued.state == optuna.trial.TrialState.WAITING and queued.params == cut.params
    out = run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=3, sampler="bruteforce", seed=0))
    (retry,) = _retries_of(trials_of(storage), cut.number)
    assert out.finished == 3 and retry.params == cut.params and retry.state == optuna.trial.TrialState.COMPLETE


def test_the_last_slot_goes_to_one_of_two_workers_starting_together(storage):
    """Two workers start at once with one slot left. Both pass a barrier in
    measure only if both got to run: checked at the trial's end (as
    MaxTrialsCallback does), both would, and the study would end with 2."""
    barrier = threading.Barrier(2, timeout=1.0)

    def measure(config, bucket):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        return 1.0

    outcomes = []
    threads = [
        threading.Thread(
            target=lambda s=s: outcomes.append(
                run_study(
                    spec(),
                    measure,
                    Fakes().check,
                    storage,
                    TuneSettings(trials=1, sampler="random", seed=s, poll_s=0.02),
                )
            )
        )
        for s in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    trials = trials_of(storage)
    assert count_finished(trials) == 1 and sum(o.ran for o in outcomes) == 1
    assert barrier.broken  # the one that ran waited for a second that never came


def _process_worker(url: str, seed: int, trials: int, start) -> None:
    fakes = Fakes(delay_s=0.02)
    start.wait(60)  # both imported: a slow start would leave the study to the other
    run_study(
        spec(normalize=partial(effective_config, exec_params=None)),
        fakes.measure,
        fakes.check,
        url,
        TuneSettings(trials=trials, sampler="random", seed=seed, poll_s=0.02),
    )


@pytest.mark.timeout(120)
def test_two_processes_on_one_sqlite_file_finish_exactly_the_asked_trials(tmp_path):
    context = multiprocessing.get_context("spawn")
    for n in (7, 12):  # two budgets, each a fresh study, so the ends fall differently
        url = f"sqlite:///{tmp_path / f'tune-{n}.db'}"
        open_storage(url)  # the tables, made before the two start, so they do not race to create them
        start = context.Barrier(2)
        workers = [context.Process(target=_process_worker, args=(url, seed, n, start)) for seed in (1, 2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
            assert w.exitcode == 0
        trials = trials_of(open_storage(url))
        states = [t.state.name for t in trials]
        assert count_finished(trials) == n, states
        assert "RUNNING" not in states and "WAITING" not in states and states.count("PRUNED") <= 2
        assert len({t.user_attrs[ATTR_WORKER]["pid"] for t in trials if ATTR_WORKER in t.user_attrs}) == 2


def test_concurrent_workers_finish_exactly_the_asked_trials(storage):
    fakes = Fakes(delay_s=0.005)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            run_study(
                spec(normalize=partial(effective_config, exec_params=None)),
                fakes.measure,
                fakes.check,
                storage,
                TuneSettings(trials=15, sampler="random", seed=seed, poll_s=0.02),
            )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    trials = trials_of(storage)
    assert count_finished(trials) == 15
    assert sorted(t.number for t in trials) == list(range(len(trials)))


def test_seeded_samplers_are_reproducible():
    def sequence(sampler: str) -> list[dict]:
        storage = optuna.storages.InMemoryStorage()
        fakes = Fakes()
        run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=8, sampler=sampler, seed=11))
        return [t.params for t in sorted(trials_of(storage), key=lambda t: t.number)]

    for sampler in ("tpe", "random", "bruteforce"):
        assert sequence(sampler) == sequence(sampler)


def test_timeout_stops_a_study(storage):
    fakes = Fakes(delay_s=0.05)
    out = run_study(
        spec(normalize=partial(effective_config, exec_params=None)),
        fakes.measure,
        fakes.check,
        storage,
        TuneSettings(trials=500, sampler="random", seed=0, timeout_s=0.3),
    )
    assert out.stop == "timeout" and 0 < out.finished < 500


def test_bad_settings(storage):
    fakes = Fakes()
    with pytest.raises(PurlinError, match="unknown sampler 'cmaes'"):
        run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=2, sampler="cmaes"))
    with pytest.raises(PurlinError, match="trials must be >= 1"):
        run_study(spec(), fakes.measure, fakes.check, storage, TuneSettings(trials=0))


def test_effective_config_per_backend():
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.tools.tune.effective import for_backend

    sampled = RunConfig.make("ring", {"channels": 2}, {"blocks": 4, "warp": 1})
    assert for_backend(sampled, "numpy") == RunConfig.make("ring", {"channels": 2, "slice_bytes": 0})
    on_gpu = for_backend(sampled, "cupy")  # the executor's own defaults fill the rest; unknown names go
    assert dict(on_gpu.exec_params) == {**{p.name: p.default for p in CupyBackend.params}, "blocks": 4}


# -- the finals over a study's outcome ----------------------------------------------------
