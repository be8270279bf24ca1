"""Ranks as processes sharing a GPU, without a GPU: how each process sizes
its grids so that every rank's kernel is resident at once, how a run starts
and stops its own MPS daemon, and how a launch's status words read."""

from __future__ import annotations

import os
import stat
import sys
import textwrap

import numpy as np
import pytest

from purlin_bench.backends.cupy.runtime import occupancy, status
from purlin_bench.procs import mps
from purlin_bench.base.errors import PurlinError

H200 = {"MaxRegistersPerMultiprocessor": 65536, "MaxThreadsPerMultiProcessor": 2048, "MaxBlocksPerMultiprocessor": 32}


def test_a_block_of_the_interpreter_takes_an_sm():
    # 128 registers x 512 threads is an H200 SM's whole register file.
    assert occupancy.blocks_per_sm(H200, 128, 512) == 1
    assert occupancy.blocks_per_sm(H200, 64, 512) == 2
    assert occupancy.blocks_per_sm(H200, 32, 128) == 16  # by threads, not registers


def test_processes_sharing_a_gpu_each_take_their_share():
    """The old sizing gave every process the whole GPU (132 blocks at one an
    SM): 8 processes under MPS asked for 8 x 132 resident blocks, and a
    waiting block could starve the block it waited on (issue 27)."""
    assert occupancy.resident_share(132, 1, 1) == 132
    assert occupancy.resident_share(132, 1, 8) == 16
    assert occupancy.resident_share(132, 2, 3) == 88
    # an MPS client limited to a share of the SMs sees only those (the
    # attribute says 14 of 132 at 12% on the H200), and clients may be given
    # the same SMs: the split is of what one client sees
    assert occupancy.resident_share(14, 1, 8) == 1
    assert occupancy.resident_share(66, 4, 8) == 33


def test_a_launch_past_its_share_is_refused_with_why(monkeypatch):
    """CupyRunner._check_coresidency with a world of 8 processes on one GPU."""
    from types import SimpleNamespace

    from purlin_bench.backends.cupy.runtime.runner import CupyRunner
    from purlin_bench.base.errors import ExecutionError

    runner = CupyRunner.__new__(CupyRunner)
    runner.world = SimpleNamespace(sharing=8)
    runner.blocks, runner.threads = 32, 512
    runner.launches = [SimpleNamespace(device=0, grid=32, cooperative=False)]
    monkeypatch.setattr(
        CupyRunner, "_capacity", lambda self, device: occupancy.resident_share(132, 1, self.world.sharing)
    )
    with pytest.raises(ExecutionError, match="at most 16 fit at once.*8 processes sharing the GPU"):
        runner._check_coresidency()
    runner.launches = [SimpleNamespace(device=0, grid=16, cooperative=False)]
    runner._check_coresidency()


def test_status_words_say_timeout_abort_or_nothing():
    words = np.zeros(status.WORDS, dtype=np.int64)
    assert status.describe(words, "all-reduce", "two-shot") is None
    words[status.ABORTED] = 1
    assert "another rank's wait timed out in all-reduce/two-shot" in status.describe(words, "all-reduce", "two-shot")
    words[:8] = [1, 3, 0, 8, (0 << 20) | 1, 0, 32, 10_000_000_000]
    said = status.describe(words, "all-reduce", "two-shot")
    assert said.startswith("watchdog: rank 3 channel 0 step 8 waited 10.00 s on r0.flag[1] (value 0, needed 32)")


# -- MPS --------------------------------------------------------------------------
FAKE_CONTROL = textwrap.dedent(
    f"""\
    #!{sys.executable}
    # A stand-in for nvidia-cuda-mps-control: -d starts a "daemon" that
    # listens on $CUDA_MPS_PIPE_DIRECTORY/control until it reads "quit".
    import os, socket, sys
    pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
    log = os.environ.get("FAKE_MPS_LOG")
    if sys.argv[1:] == ["-d"]:
        if os.environ.get("FAKE_MPS_FAIL"):
            print("An instance of this daemon is already running", file=sys.stderr); sys.exit(1)
        if os.fork():
            sys.exit(0)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        s = socket.socket(socket.AF_UNIX); s.bind(os.path.join(pipe, "control")); s.listen(8)
        while True:
            c, _ = s.accept()
            if c.recv(16).startswith(b"quit"):
                if log: open(log, "a").write("quit\\n")
                s.close(); os.unlink(os.path.join(pipe, "control")); os._exit(0)
            c.close()
    else:
        c = socket.socket(socket.AF_UNIX); c.connect(os.path.join(pipe, "control")); c.sendall(sys.stdin.buffer.read())
    """
)


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "nvidia-cuda-mps-control"
    path.parent.mkdir()
    path.write_text(FAKE_CONTROL)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_MPS_LOG", str(tmp_path / "log"))
    return path


@pytest.mark.timeout(30)
def test_a_private_daemon_serves_the_run_and_is_gone_after(fake_control, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    before = dict(os.environ)
    with mps.PrivateMps(str(fake_control)) as daemon:
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
        assert pipe.startswith(str(daemon.root)) and mps.serving()
        assert mps.gpu_scheduling() == mps.CONCURRENT
    assert (tmp_path / "log").read_text() == "quit\n"  # told to quit, not killed
    assert not os.path.exists(pipe) and dict(os.environ) == before
    assert mps.gpu_scheduling() == mps.TIME_SLICED or mps.serving()  # a system daemon, if any, is not ours


@pytest.mark.timeout(30)
def test_the_daemon_stops_on_an_error_inside_the_run(fake_control, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with mps.PrivateMps(str(fake_control)):
            root = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
            raise KeyboardInterrupt
    assert (tmp_path / "log").read_text() == "quit\n" and not os.path.exists(root)


@pytest.mark.timeout(30)
def test_a_daemon_that_will_not_start_is_one_line(fake_control, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    with pytest.raises(PurlinError, match=r"--mps: nvidia-cuda-mps-control -d failed \(An instance of this daemon"):
        with mps.PrivateMps(str(fake_control)):
            pass
    with pytest.raises(PurlinError, match="--mps needs nvidia-cuda-mps-control"):
        monkeypatch.setenv("PATH", "/nonexistent")
        with mps.PrivateMps():
            pass


def test_no_daemon_is_time_sliced(tmp_path):
    assert not mps.serving({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)})
    (tmp_path / "control").write_text("not a socket")
    assert mps.gpu_scheduling({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}) == mps.TIME_SLICED


def test_a_failed_call_makes_every_later_call_of_the_communicator_raise():
    """Issue 27: a call a watchdog aborted handed zeros to the serving stack
    and nothing was raised. Now the next call reads the process's summary
    word (no sync) and raises the recorded error, and so does every call
    after it, as a torch NCCL communicator does after a watchdog abort."""
    from types import SimpleNamespace

    from purlin_bench.base.errors import WatchdogTimeout
    from purlin_bench.torch import Communicator

    said = "watchdog: rank 3 channel 0 step 8 waited 10.00 s on r0.flag[1] (value 0, needed 32) in all-reduce/two-shot"
    faulted = [False]
    comm = Communicator.__new__(Communicator)
    comm._closed, comm._failure, comm.rank = False, None, 1
    comm.backend = SimpleNamespace(faulted=lambda: faulted[0])
    comm._prepared = {
        "a": SimpleNamespace(ncounts=0, runner=SimpleNamespace(failure=lambda: None)),
        "b": SimpleNamespace(ncounts=0, runner=SimpleNamespace(failure=lambda: said)),
    }
    comm._raise_if_failed()  # nothing recorded: nothing raised, nothing read past the summary word
    mine = comm._prepared.pop("b")
    faulted[0] = True  # another communicator of this process failed: not this one's to raise
    comm._raise_if_failed()
    comm._prepared["b"] = mine
    for _ in range(2):
        with pytest.raises(
            WatchdogTimeout, match=r"rank 1: an earlier call failed \(watchdog: rank 3 channel 0 step 8"
        ):
            comm.all_reduce(object())
    faulted[0] = False  # a reset elsewhere does not make this communicator's peers consistent again
    with pytest.raises(WatchdogTimeout, match="cannot run more calls: make a new one"):
        comm.broadcast(object())


def test_a_count_out_of_range_is_raised_once_and_the_communicator_goes_on():
    """Issue 31: a count a GPU wrote out of range ran clamped (flags sound):
    the next call raises a CountsError, and the calls after it run."""
    from types import SimpleNamespace

    from purlin_bench.base.errors import CountsError
    from purlin_bench.torch import Communicator

    recorded = ["counts: all-to-all-v's count 5 (c(1, 1)) was 999 in device memory, outside 0..64"]

    def raise_counts_error():
        if recorded:
            raise CountsError(recorded.pop())

    comm = Communicator.__new__(Communicator)
    comm._closed, comm._failure, comm.rank = False, None, 0
    comm.backend = SimpleNamespace(faulted=lambda: bool(recorded))
    comm._prepared = {
        "v": SimpleNamespace(
            ncounts=16, runner=SimpleNamespace(raise_counts_error=raise_counts_error, failure=lambda: None)
        )
    }
    with pytest.raises(CountsError, match="was 999 in device memory"):
        comm._raise_if_failed()
    comm._raise_if_failed()  # forgotten once raised: not latched, as a timeout is
    assert comm._failure is None


@pytest.mark.timeout(60)
def test_mps_flag_serves_the_ranks_the_launcher_starts_and_stops_after(fake_control, tmp_path):
    """`--procs 2 --mps`: the ranks run with the private daemon's pipe folder
    in their environment (their header says concurrent), and it quits after."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PATH": f"{fake_control.parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": root}
    env.pop("CUDA_MPS_PIPE_DIRECTORY", None)
    cmd = [
        sys.executable,
        "-m",
        "purlin_bench",
        "check",
        "all-gather",
        "--procs",
        "2",
        "--mps",
        "--backend",
        "numpy",
        "--count",
        "5",
        "--strategy",
        "direct",
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=50, cwd=root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "log").read_text() == "quit\n"
    assert "Traceback" not in done.stderr
    refused = subprocess.run(
        cmd[:4] + ["--mps", "--backend", "numpy"], env=env, capture_output=True, text=True, timeout=30
    )
    assert refused.returncode != 0 and "--mps runs the ranks of --procs" in refused.stderr
