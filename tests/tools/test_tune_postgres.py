"""Two `purlin tune` workers on one PostgreSQL study (numpy backend) together
complete exactly the asked number of trials: none lost, none duplicated.

Needs a server: PURLIN_TEST_POSTGRES_URL (.ci/start-postgres.sh starts one
and sets it). Without it the test skips, unless PURLIN_REQUIRE_POSTGRES=1
(as in CI), where a missing or unreachable server fails it (tests/conftest.py
and the fixture below)."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import uuid

import pytest

pytestmark = pytest.mark.postgres

TRIALS = 16
# 1 MiB all-reduce on 4 simulated ranks: tenths of a second per trial, so the
# two workers overlap; 48 distinct configurations, so few trials are repeats.
SWEEP = f"""\
name: shared
sizes: [1M]
dtypes: [float32]
ranks: [4]
trials: {TRIALS}
space:
  strategy: [direct, push, two-shot, ring]
  params:
    channels: [1, 2, 3, 4]
    slice_bytes: [0, 64K, 256K]
"""


@pytest.fixture
def database_url():
    """A fresh database on the test server, dropped afterwards. (conftest.py
    skips, or under PURLIN_REQUIRE_POSTGRES=1 fails, when no URL is set.)"""
    import psycopg2

    url = os.environ["PURLIN_TEST_POSTGRES_URL"]
    try:
        admin = psycopg2.connect(url, connect_timeout=10)
    except psycopg2.Error as exc:
        message = f"cannot reach the PostgreSQL server at {url}: {exc}"
        if os.environ.get("PURLIN_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    admin.autocommit = True
    name = f"purlin_t_{uuid.uuid4().hex[:12]}"
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    base, _, _ = url.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def test_two_workers_share_one_study(tmp_path, database_url):
    sweep = tmp_path / "shared.yaml"
    sweep.write_text(SWEEP)

    def worker(n: int) -> subprocess.Popen:
        command = [
            sys.executable,
            "-m",
            "purlin_bench.cli.main",
            "tune",
            "all-reduce",
            "--sweep",
            str(sweep),
            "--backend",
            "numpy",
            "--storage",
            database_url,
            "--out",
            str(tmp_path / f"w{n}"),
            "--sampler",
            "random",
            "--seed",
            str(n),
        ]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    workers = [worker(1), worker(2)]
    results = [(w.pid, *w.communicate(timeout=240), w.returncode) for w in workers]
    for pid, out, err, code in results:
        assert code == 0, f"worker {pid} failed:\n{err}"

    import optuna

    from purlin_bench.tools.tune.storage import open_storage
    from purlin_bench.tools.tune.tuner import count_finished, is_counted

    storage = open_storage(database_url)
    (name,) = optuna.get_all_study_names(storage)
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    states = collections.Counter(t.state.name for t in trials)
    assert count_finished(trials) == TRIALS, states  # exactly the asked number: none lost, none extra
    assert sorted(t.number for t in trials) == list(range(len(trials)))  # each trial recorded once
    assert states.get("RUNNING", 0) == 0 and states.get("WAITING", 0) == 0
    assert states.get("PRUNED", 0) <= len(workers)  # at most one slot-less trial per worker
    by_worker = collections.Counter(t.user_attrs["worker"]["pid"] for t in trials if is_counted(t))
    assert set(by_worker) == {pid for pid, *_ in results}, f"both workers should have run trials: {dict(by_worker)}"
    assert sum(by_worker.values()) == TRIALS
    # Both workers wrote a plan from the same study.
    for n in (1, 2):
        assert (tmp_path / f"w{n}" / "cpu" / "all-reduce-4vr-float32.json").exists()
