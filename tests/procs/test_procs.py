"""One process per rank on the CPU reference: the whole multi-process path
(launch, store, shared memory, flags, rank 0 driving, errors, a killed rank)
as CI runs it, with real processes and no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]


def purlin(*args: str, timeout: float = 240, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """The CLI's result; its ``pid`` (the launcher's, with --procs) finds its runs' folders (own_run_dirs)."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PURLIN_STORE", "PURLIN_TOKEN", "PURLIN_RUN", "PURLIN_WATCHDOG_S"):
        environ.pop(name, None)
    environ.update(env or {})
    with subprocess.Popen(
        [sys.executable, "-m", "purlin_bench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
        cwd=kw.get("cwd", ROOT),
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done.pid = proc.pid
    return done


def own_run_dirs(launcher_pid: int) -> set[str]:
    """The shared-memory folders of the runs one launcher started (their run
    ids begin with its pid, procs/launch.py): not other runs' of this user,
    which anything else running purlin on the machine makes and removes."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
    return {p.name for p in base.glob(f"purlin-{os.getuid()}-{launcher_pid}-*")}


@pytest.mark.timeout(300)
def test_check_every_collective_and_strategy_on_2_3_and_5_processes():
    done = purlin(
        "check",
        "all",
        "--procs",
        "2,3,5",
        "--backend",
        "numpy",
        "--strategy",
        "all",
        "--dtype",
        "float32,int32",
        "--count",
        "1,1001",
        "--failed-only",
    )
    assert done.returncode == 0, done.stderr + done.stdout
    verdicts = [line for line in done.stdout.splitlines() if "passed" in line]
    assert len(verdicts) == 3 and all(v.startswith("all passed") for v in verdicts), done.stdout
    assert all(" 0 wrong, 0 errors" in v for v in verdicts)
    assert own_run_dirs(done.pid) == set(), "a run left its shared-memory folder behind"


@pytest.mark.timeout(120)
def test_bench_prints_the_nccl_tests_columns_once_from_rank_0(tmp_path):
    out = tmp_path / "bench.json"
    done = purlin(
        "bench",
        "all-reduce",
        "--procs",
        "2",
        "--backend",
        "numpy",
        "-e",
        "1K",
        "--json",
        str(out),
        "--format",
        "nccl-tests",
    )
    assert done.returncode == 0, done.stderr
    header = [line for line in done.stdout.splitlines() if "redop" in line]
    assert len(header) == 1 and "#wrong" in header[0] and "busbw" in header[0], done.stdout
    assert "2 processes" in done.stdout and "slowest rank" in done.stdout
    data = json.loads(out.read_text())
    assert data["environment"]["procs"] == 2 and data["complete"]
    assert len(data["results"]) == 8  # 8 B .. 1 KiB
    assert all(r[side]["nwrong"] == 0 for r in data["results"] for side in ("out_of_place", "in_place"))


@pytest.mark.gpu
@pytest.mark.timeout(200)
def test_bench_on_one_gpu_with_ranks_in_processes_leaves_nccl_out_and_says_why(tmp_path):
    out = tmp_path / "bench.json"
    done = purlin(
        "bench",
        "all-reduce",
        "--procs",
        "2",
        "--backend",
        "cupy",
        "-b",
        "8",
        "-e",
        "1K",
        "-f",
        "16",
        "-n",
        "3",
        "-w",
        "1",
        "-G",
        "1",
        "--baseline",
        "nccl,default",
        "--json",
        str(out),
        "--format",
        "nccl-tests",
        timeout=180,
    )
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    header = [line for line in done.stdout.splitlines() if "redop" in line]
    assert len(header) == 1 and "#wrong" in header[0], done.stdout
    assert "baseline nccl left out: NCCL refuses two ranks on one GPU" in done.stderr, done.stderr
    data = json.loads(out.read_text())
    assert data["environment"]["procs"] == 2 and len(data["results"]) == 2  # 8 B and 128 B
    assert all(r[side]["nwrong"] == 0 for r in data["results"] for side in ("out_of_place", "in_place"))


@pytest.mark.timeout(200)
def test_tune_writes_a_plan_for_the_process_layout(tmp_path):
    done = purlin(
        "tune",
        "all-reduce",
        "--procs",
        "2",
        "--backend",
        "numpy",
        "--out",
        str(tmp_path),
        "--trials",
        "3",
        "--dtype",
        "float32",
        "--sizes",
        "1K",
        "--confirm",
        "1",
    )
    assert done.returncode == 0, done.stderr
    path = tmp_path / "cpu" / "all-reduce-2proc-cpu-float32.json"
    assert path.is_file(), list(tmp_path.rglob("*"))
    plan_data = json.loads(path.read_text())
    assert plan_data["fingerprint"]["layout"] == "2proc-cpu"
    # A plan for 2 processes is not one for 2 simulated ranks in one process.
    other = purlin("bench", "all-reduce", "--backend", "numpy", "--ranks", "2", "-e", "1K", "--plan", str(path))
    assert other.returncode != 0 and "2proc-cpu vs 2vr" in other.stderr


@pytest.mark.timeout(240)
def test_two_runs_started_at_once_both_finish_correctly():
    results: list[subprocess.CompletedProcess] = []
    args = ("check", "all-reduce", "--procs", "3", "--backend", "numpy", "--strategy", "all")

    def one() -> None:
        results.append(purlin(*args))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2
    for done in results:
        assert done.returncode == 0, done.stderr
        assert "all passed" in done.stdout


def test_a_watchdog_on_one_rank_stops_the_others_at_once():
    """A call that times out on one rank (a 5 ms watchdog) ends the command
    on every rank in seconds: none is left in a barrier of the same command."""
    start = time.monotonic()
    done = purlin(
        "bench",
        "all-reduce",
        "--procs",
        "3",
        "--backend",
        "numpy",
        "-b",
        "1M",
        "-e",
        "4M",
        "--strategy",
        "all",
        env={"PURLIN_WATCHDOG_S": "0.005"},
        timeout=90,
    )
    assert time.monotonic() - start < 60
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "watchdog: rank" in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_a_stray_rank_environment_does_not_make_a_run():
    """RANK and WORLD_SIZE left in a shell (or set for a job of the user's
    own) do not make `purlin --help` or `purlin list` join anything."""
    for args in (("--help",), ("list",)):
        stray = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
        done = purlin(*args, env=stray, timeout=30)
        assert done.returncode == 0 and done.stdout, done.stderr


def test_procs_bad_input_is_one_line_before_any_process_starts():
    for args, says in [
        (("check", "all-reduce", "--procs", "2,3", "--backend", "numpy", "--json"), "one --procs count"),
        (
            ("bench", "all-reduce", "--procs", "2,3", "--backend", "numpy", "--csv", "/tmp/never.csv"),
            "one --procs count",
        ),
        (("check", "all-reduce", "--procs", "2", "--ranks", "3", "--backend", "numpy"), "leave out --ranks"),
        (("check", "all-reduce", "--procs", "0", "--backend", "numpy"), "--procs"),
        (("check", "all-reduce", "--procs", "two", "--backend", "numpy"), "--procs"),
        (("check", "all-reduce", "--procs", "2", "--backend", "fake"), "cannot run one process per rank"),
        (("bench", "all-reduce", "--procs", "2", "--backend", "numpy", "--gpus", "0"), "--gpus"),
    ]:
        done = purlin(*args, timeout=60)
        assert done.returncode != 0, args
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], (args, done.stderr)
    for value in ("abc", "nan", "0", "-1"):
        done = purlin(
            "check", "all-reduce", "--procs", "2", "--backend", "numpy", env={"PURLIN_WATCHDOG_S": value}, timeout=60
        )
        one_line = done.stderr.strip().count("\n") == 0
        assert done.returncode != 0 and one_line and "PURLIN_WATCHDOG_S" in done.stderr, done.stderr


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("procs", [2, 4])
def test_check_on_one_gpu_with_ranks_in_processes(procs):
    """Correctness only: the processes time-slice the GPU."""
    done = purlin(
        "check",
        "all",
        "--procs",
        str(procs),
        "--backend",
        "cupy",
        "--strategy",
        "all",
        "--dtype",
        "float32,bfloat16,int32",
        "--count",
        "1,1001,65539",
        "--root",
        "all",
        "--failed-only",
        timeout=280,
    )
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    assert "all passed" in done.stdout and " 0 wrong, 0 errors" in done.stdout


@pytest.mark.gpu
@pytest.mark.timeout(200)
@pytest.mark.parametrize("collective", ["broadcast", "gather", "scatter", "reduce"])
def test_rooted_collectives_with_ranks_in_processes_on_one_gpu(collective):
    """The root has the data and its peers little or none: every process
    must still launch the same blocks a group (their notifies count them)."""
    done = purlin(
        "check",
        collective,
        "--procs",
        "2",
        "--backend",
        "cupy",
        "--strategy",
        "all",
        "--count",
        "4096,65539",
        "--root",
        "all",
        "--failed-only",
        timeout=150,
    )
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    assert "all passed" in done.stdout and " 0 wrong, 0 errors" in done.stdout
