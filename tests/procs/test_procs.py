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

import numpy as np
import pytest

from purlin_bench.backends.numpy.ranks import RankRunner
from purlin_bench.backends.procs import Procs
from purlin_bench.procs import Group, Store, StoreServer, channel
from purlin_bench.base.errors import WatchdogTimeout
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec.instance import instantiate
from purlin_bench.spec.loader import resolve

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


# -- the rank runner in one process, two ranks on two threads -----------------
def _two_ranks(tmp_path: Path, watchdog_s: float):
    token = b"t" * 32
    server = StoreServer(token)
    groups = [Group(Store(*server.address, token), r, 2, "test", timeout_s=10) for r in range(2)]
    return server, [Procs(g, g.rank, 2, None, tmp_path, "test", watchdog_s) for g in groups]


def _program(collective: str, strategy: str, count: int = 1001):
    inst = instantiate(resolve(collective), 2, count, 4)
    return inst, derive_program(inst, strategy, "float32", None, {}, False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", ["direct", "push", "two-shot", "ring"])
def test_rank_runners_on_threads_match_the_reference(tmp_path, strategy):
    server, procs = _two_ranks(tmp_path, 10)
    inst, program = _program("all-reduce", strategy)
    runners: list[RankRunner | None] = [None, None]

    def make(r: int) -> None:
        runners[r] = RankRunner(program, procs[r], 2, "t")

    threads = [threading.Thread(target=make, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    inputs = exact_inputs(program.in_counts, np.dtype(np.float32), "sum")
    expected = inst.reference(inputs, "sum")
    for slot in range(2):
        runners[0].load(inputs, slot)
        for call in range(3):  # epochs advance; the same flags serve every call
            threads = [threading.Thread(target=runners[r].run, args=(slot,)) for r in range(2)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            got = runners[1].outputs(slot)  # any rank reads every rank's buffers
            assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert not list(tmp_path.iterdir()), "the shared files were not unlinked once mapped"
    for r in runners:
        r.close()
    server.close()


@pytest.mark.timeout(60)
def test_a_peer_that_never_calls_is_a_watchdog_naming_rank_step_and_flag(tmp_path):
    server, procs = _two_ranks(tmp_path, 0.5)
    _, program = _program("all-reduce", "direct", 64)
    runners: list[RankRunner | None] = [None, None]
    threads = [
        threading.Thread(target=lambda r=r: runners.__setitem__(r, RankRunner(program, procs[r], 1, "w")))
        for r in range(2)
    ]
    [t.start() for t in threads]
    [t.join() for t in threads]
    start = time.monotonic()
    with pytest.raises(WatchdogTimeout) as err:
        runners[0].run(0)  # rank 1 never runs
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert "rank 0 channel" in message and "step" in message and "r0.flag[" in message
    assert "its notify never came" in message
    runners[0].reset()
    assert int(runners[0].flags[0].max()) == 0 and runners[0].epoch == 0
    for r in runners:
        r.close()
    server.close()


def test_every_flag_has_one_notifier_a_call():
    """The shared-memory flags are plain stores (ranks.py): that needs one
    process, one step, per flag word and call."""
    from purlin_bench.program.model import Notify
    from purlin_bench.spec.loader import load_all_builtin
    from purlin_bench.strategies import STRATEGIES

    for spec in load_all_builtin():
        for ranks in (2, 3, 5):
            inst = instantiate(spec, ranks, 33, 4)
            for name in STRATEGIES:
                try:
                    program = derive_program(inst, name, "float32", None, {}, False)
                except Exception:
                    continue
                notifiers: dict = {}
                for sid, step in program.steps():
                    if isinstance(step, Notify):
                        notifiers.setdefault(step.flag, []).append(sid)
                assert all(len(s) == 1 for s in notifiers.values()), (spec.name, ranks, name)


def test_processors_that_reorder_stores_are_refused_in_one_line():
    from purlin_bench.backends.numpy.ranks import check_store_order
    from purlin_bench.base.errors import ExecutionError

    check_store_order("x86_64")
    check_store_order("AMD64")
    for machine in ("aarch64", "arm64", "ppc64le", ""):
        with pytest.raises(ExecutionError, match="x86's store order.*without --procs"):
            check_store_order(machine)


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


@pytest.mark.timeout(60)
def test_the_run_opens_with_every_ranks_collective_setup_in_one_command(tmp_path, monkeypatch):
    """A part's collective setup (the CUDA IPC world's device exchange) runs
    on every rank in the open command: made lazily by rank 0's first local
    call (the floor's copy bandwidth), it waited for workers that were
    waiting for a command, and bench --procs on a GPU printed nothing."""
    from purlin_bench.backends import procs as procs_mod
    from purlin_bench.backends.numpy import NumpyBackend

    joined = []

    def join_run(self):
        self.procs.group.barrier("test-join", timeout_s=5)  # a DistError unless both ranks are here
        joined.append(self.procs.rank)

    monkeypatch.setattr(NumpyBackend, "join_run", join_run)
    monkeypatch.setattr(channel, "sequence", [0])  # this run's commands start at 1, as a fresh process's do
    monkeypatch.setattr(procs_mod, "_drivers", {})
    server, procs = _two_ranks(tmp_path, 10)
    codes = []
    worker = threading.Thread(target=lambda: codes.append(procs_mod.serve(procs[1])))
    worker.start()
    procs_mod.drive(NumpyBackend, procs[0])
    assert sorted(joined) == [0, 1]
    procs_mod._send(procs[0], ("exit",))
    worker.join(10)
    assert codes == [0]
    server.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "failing, raised, said_by",
    [
        ({0: "refuse"}, "CapacityError", 0),
        ({1: "refuse"}, "CapacityError", 1),
        ({0: "refuse", 1: "refuse"}, "CapacityError", 0),
        ({0: "refuse", 1: "fail"}, "ExecutionError", 1),  # a refusal never hides a failure
        ({0: "fail", 1: "refuse"}, "ExecutionError", 0),
    ],
    ids=["rank0", "rank1", "both", "rank0-refuses-rank1-fails", "rank0-fails-rank1-refuses"],
)
def test_a_build_bound_refusal_on_any_rank_reaches_rank_0_as_itself(tmp_path, monkeypatch, failing, raised, said_by):
    """check reports a program past the compiled kernel's build bound as n/a
    (a CapacityError): with ranks in processes the refusal must arrive as
    one too, from whichever rank refused, not as the ExecutionError of a
    failed run, unless another rank truly failed; the runners the other
    ranks made are closed, and the run goes on."""
    from purlin_bench.backends import procs as procs_mod
    from purlin_bench.backends.numpy import NumpyBackend
    from purlin_bench.base.errors import CapacityError, ExecutionError

    real_prepare, closed = NumpyBackend.prepare, []

    class Made:  # a runner made without the ranks' shared setup, so no rank waits on the failing one
        def __init__(self, rank):
            self.rank = rank

        def close(self):
            closed.append(self.rank)

    def prepare(self, program, sets=1, **params):
        if program.strategy != "ring":
            return real_prepare(self, program, sets, **params)
        how = failing.get(self.procs.rank)
        if how == "refuse":
            raise CapacityError("past the build bound: use kernel=interpreted")
        if how == "fail":
            raise ExecutionError("the device went away")
        return Made(self.procs.rank)

    monkeypatch.setattr(NumpyBackend, "prepare", prepare)
    monkeypatch.setattr(channel, "sequence", [0])
    monkeypatch.setattr(procs_mod, "_drivers", {})
    server, procs = _two_ranks(tmp_path, 10)
    codes = []
    worker = threading.Thread(target=lambda: codes.append(procs_mod.serve(procs[1])))
    worker.start()
    try:
        driver = procs_mod.drive(NumpyBackend, procs[0])
        with pytest.raises((CapacityError, ExecutionError)) as caught:
            driver.prepare(_program("all-reduce", "ring")[1])
        assert type(caught.value).__name__ == raised and str(caught.value).startswith(f"rank {said_by}: ")
        assert sorted(closed) == [r for r in (0, 1) if r not in failing]
        runner = driver.prepare(_program("all-reduce", "direct")[1])
        runner.run()
        runner.close()
        assert driver.lost is None
    finally:
        procs_mod._send(procs[0], ("exit",))
        worker.join(10)
        server.close()
    assert codes == [0]


def test_an_error_crosses_ranks_by_its_class_name():
    """What a worker's answer carries of an error, and what rank 0 raises
    for it: a refusal keeps its class (one this process lacks is still a
    ProgramError), a cancellation stays one, anything else is an ExecutionError;
    a failure is said before a refusal, and both before a cancellation."""
    import pickle

    from purlin_bench.procs.errors import Cancelled, error_kind, error_of, kind_order
    from purlin_bench.base.errors import CallAborted, CapacityError, ExecutionError, ProgramError
    from purlin_bench.program.validate import ProgramInvalid

    for exc in (
        CapacityError("c"),
        ProgramInvalid("p"),
        Cancelled("x"),
        ExecutionError("e"),
        WatchdogTimeout("w"),
        CallAborted("a"),
    ):
        kind = pickle.loads(pickle.dumps(error_kind(exc)))
        back = error_of(kind, "m")
        kept = isinstance(exc, (CapacityError, Cancelled, CallAborted))
        want = type(exc) if kept else ProgramError if isinstance(exc, ProgramError) else ExecutionError
        assert type(back) is want and str(back) == "m"
    assert type(error_of("NotAClassHere", "m")) is ProgramError and type(error_of("PurlinError", "m")) is ProgramError
    orders = [kind_order(error_kind(e)) for e in (ExecutionError("e"), CapacityError("c"), Cancelled("x"))]
    assert orders == sorted(set(orders))
    # a call left because another rank's wait timed out is said after that timeout, as a cancellation is
    assert (
        kind_order(error_kind(CallAborted("a")))
        == kind_order(error_kind(Cancelled("x")))
        > kind_order(error_kind(WatchdogTimeout("w")))
    )


class _DeviceExchangingWorld:
    """The CUDA IPC world's collective part, without CuPy: every rank's
    device goes to every other over the group when it is made."""

    def __init__(self, ranks, procs):
        where = procs.group.allgather((0, "bus-0"), "ipc-devices")
        self.devices, self.gpus = (0,) * ranks, len({bus for _, bus in where})
        self.shared_gpu = self.gpus < ranks


@pytest.mark.timeout(60)
def test_the_gpu_world_is_made_on_every_rank_when_the_run_opens(tmp_path, monkeypatch):
    """Rank 0's first local calls (the floor's copy bandwidth, the
    baselines) then find the world made and wait on no peer."""
    import purlin_bench.backends.cupy.runtime.device as device
    import purlin_bench.backends.cupy.runtime.ipc as ipc
    from purlin_bench.backends import procs as procs_mod
    from purlin_bench.backends.cupy import CupyBackend

    monkeypatch.setattr(ipc, "IpcWorld", _DeviceExchangingWorld)
    monkeypatch.setattr(device, "measure_copy_bandwidth", lambda devices: ("measured on", devices))
    monkeypatch.setattr(channel, "sequence", [0])
    monkeypatch.setattr(procs_mod, "_drivers", {})
    server, procs = _two_ranks(tmp_path, 10)
    codes = []
    worker = threading.Thread(target=lambda: codes.append(procs_mod.serve(procs[1])), daemon=True)
    worker.start()
    driver = procs_mod.drive(CupyBackend, procs[0])
    assert driver.copy_bandwidth() == ("measured on", (0, 0))
    # two ranks on one GPU: no NCCL (a reason for a user who asks for it), the one-kernel IPC baseline
    assert driver.baselines() == ("ipc",) and "NCCL refuses two ranks on one GPU" in driver.refused_baselines()["nccl"]
    procs_mod._send(procs[0], ("exit",))
    worker.join(10)
    assert codes == [0]
    server.close()
