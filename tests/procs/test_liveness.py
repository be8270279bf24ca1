"""A rank that dies or stops ends the run promptly, naming it: a killed rank
through the launcher's abort; a frozen peer, or a store that never greets,
within the user's bound (PURLIN_WATCHDOG_S), while a live peer busy for
longer than that is waited for (procs/liveness.py, procs/channel.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from purlin_bench.procs import Group, PeerTimeout, Store, StoreServer, StoreUnreachable
from tests.procs.test_procs import ROOT, own_run_dirs

LINUX = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the ranks through /proc (Linux)")


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    found = [e for e in env if e.startswith(b"RANK=")]
    return int(found[0][5:]) if found else None


def _ranks_of(launcher, count: int, ranks: dict[int, int] | None = None, seconds: float = 60) -> dict[int, int]:
    """Rank -> pid of ``launcher``'s ``count`` ranks, once all have started
    (a loaded machine, another run beside the tests, starts them slowly);
    filled into ``ranks`` as they appear, so a caller's cleanup finds them
    even when not all start."""
    ranks = {} if ranks is None else ranks
    deadline = time.monotonic() + seconds
    while len(ranks) < count and time.monotonic() < deadline:
        ranks.update({r: p for p in _children(launcher.pid) if (r := _rank_of(p)) is not None})
        time.sleep(0.1)
    assert len(ranks) == count, f"the ranks did not start: {ranks}"
    return ranks


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.timeout(120)
@LINUX
@pytest.mark.parametrize("backend", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def test_killing_a_rank_mid_run_stops_every_other_with_a_named_error(backend):
    # The default watchdog: a rank must notice the death through the run (the
    # launcher's abort), not by its own wait running out.
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    environ.pop("PURLIN_WATCHDOG_S", None)
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "purlin_bench",
            "bench",
            "all",
            "--procs",
            "3",
            "--backend",
            backend,
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "2",
            "-n",
            "5",
            "-w",
            "1",
            "-G",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
        cwd=ROOT,
    )
    ranks = _ranks_of(launcher, 3)
    time.sleep(3)  # in the middle of the benchmark's calls
    assert launcher.poll() is None, launcher.communicate()
    killed_at = time.monotonic()
    os.kill(ranks[1], signal.SIGKILL)
    _, err = launcher.communicate(timeout=60)
    took = time.monotonic() - killed_at
    assert launcher.returncode != 0
    assert "rank 1 was killed by SIGKILL" in err, err
    # Rank 0 says what it was doing and what happened, in one line, no traceback.
    assert "Traceback" not in err, err
    assert any(line.startswith("purlin: error:") and "rank 1" in line for line in err.splitlines()), err
    assert took < (20 if backend == "cupy" else 10), f"the run took {took:.0f} s to stop"
    assert "still running" not in err, "a rank had to be stopped by the launcher instead of saying why it stopped"
    assert not any(_alive(p) for p in ranks.values()), "a rank was left running"
    assert own_run_dirs(launcher.pid) == set()


def _environ(**extra: str) -> dict[str, str]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PURLIN_STORE", "PURLIN_TOKEN", "PURLIN_RUN", "PURLIN_WATCHDOG_S"):
        environ.pop(name, None)
    return {**environ, **extra}


@pytest.mark.timeout(30)
def test_a_live_peer_busy_for_longer_than_the_bound_is_waited_for():
    """Silence is bounded, not time: a rank that reaches a barrier 3 s late
    while beating is no failure under a 1 s bound."""
    token = b"k" * 32
    with StoreServer(token) as server:
        groups = [
            Group(Store(*server.address, token, timeout_s=1), r, 2, "slow", timeout_s=20, silence_s=1.0)
            for r in range(2)
        ]

        def late() -> None:
            time.sleep(3)
            groups[1].barrier("b")

        worker = threading.Thread(target=late)
        worker.start()
        start = time.monotonic()
        groups[0].barrier("b")
        assert time.monotonic() - start > 2.5
        worker.join(10)
        for g in groups:
            g.close()


STOPPABLE = r"""
import os, sys
from purlin_bench.procs import Group, Store
host, port, token = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
g = Group(Store(host, port, token, timeout_s=1), 1, 2, "frozen", timeout_s=60, silence_s=1.0)
os.kill(os.getpid(), __import__("signal").SIGSTOP)  # frozen, with its heartbeat thread
g.barrier("b")
"""


@pytest.mark.timeout(30)
def test_a_stopped_peer_ends_a_barrier_within_the_bound_naming_it_and_the_step():
    token = b"f" * 32
    with StoreServer(token) as server:
        group = Group(Store(*server.address, token, timeout_s=1), 0, 2, "frozen", timeout_s=60, silence_s=1.0)
        child = subprocess.Popen(
            [sys.executable, "-c", STOPPABLE, *map(str, server.address), token.hex()], env=_environ()
        )
        try:
            start = time.monotonic()
            with pytest.raises(PeerTimeout) as info:
                group.barrier("b")
            took = time.monotonic() - start
        finally:
            child.kill()
            child.wait(10)
        group.close()
    message = str(info.value)
    assert took < 8, f"a stopped peer held the barrier for {took:.0f} s"
    assert "rank 0" in message and "'b'" in message and "rank 1 has shown no sign of life" in message, message
    assert "\n" not in message


@pytest.mark.timeout(30)
def test_a_peer_that_never_joins_is_named_after_the_start_up_allowance(monkeypatch):
    from purlin_bench.procs import liveness

    monkeypatch.setattr(liveness, "STARTUP_S", 1.0)
    token = b"n" * 32
    with StoreServer(token) as server:
        group = Group(Store(*server.address, token, timeout_s=1), 0, 2, "never", timeout_s=60, silence_s=1.0)
        start = time.monotonic()
        with pytest.raises(PeerTimeout, match="rank 1 has not joined the run in 2 s"):
            group.barrier("b")
        assert time.monotonic() - start < 6
        group.close()


@pytest.mark.timeout(30)
def test_an_address_that_accepts_and_never_greets_is_one_line_within_the_bound():
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody ever greets
    host, port = silent.getsockname()[:2]
    try:
        start = time.monotonic()
        with pytest.raises(StoreUnreachable) as info:
            Store(host, port, b"t" * 32, timeout_s=1)
        assert time.monotonic() - start < 3
        assert "sent no greeting within 1 s" in str(info.value) and "\n" not in str(info.value)
        # A rank pointed at it gives up within the user's watchdog, in one line, not after 600 s.
        environ = _environ(
            RANK="1",
            WORLD_SIZE="2",
            PURLIN_STORE=f"{host}:{port}",
            PURLIN_TOKEN="ab" * 32,
            PURLIN_RUN="silent",
            PURLIN_WATCHDOG_S="2",
        )
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "purlin_bench", "check", "all-reduce", "--backend", "numpy"],
            capture_output=True,
            text=True,
            timeout=25,
            env=environ,
            cwd=ROOT,
        )
        assert time.monotonic() - start < 15
    finally:
        silent.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "sent no greeting within 2 s" in lines[0], done.stderr


@pytest.mark.timeout(180)
@LINUX
def test_a_stopped_rank_ends_the_run_within_the_watchdog_naming_it():
    """Rank 1 stopped (SIGSTOP) mid-benchmark: rank 0 says so within the
    watchdog, in one line, and the launcher ends the stopped rank at once:
    no 600 s command timeout, no grace period for a rank that cannot act."""
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "purlin_bench",
            "bench",
            "all-reduce",
            "--procs",
            "2",
            "--backend",
            "numpy",
            "--strategy",
            "all",
            "-b",
            "1K",
            "-e",
            "4M",
            "-f",
            "2",
            "-n",
            "50",
            "-w",
            "1",
            "-G",
            "5",
        ],  # about 10 s
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environ(PURLIN_WATCHDOG_S="2"),
        cwd=ROOT,
    )
    ranks: dict[int, int] = {}
    try:
        _ranks_of(launcher, 2, ranks)
        # Rank 0 prints the header once every rank has joined (a loaded
        # machine can take tens of seconds): only then is rank 1 mid-run.
        header = launcher.stdout.readline()
        assert header.startswith("#"), header
        time.sleep(1.5)  # in the middle of the benchmark's calls
        assert launcher.poll() is None, launcher.communicate()
        stopped_at = time.monotonic()
        os.kill(ranks[1], signal.SIGSTOP)
        _, err = launcher.communicate(timeout=90)
        took = time.monotonic() - stopped_at
    finally:
        for pid in ranks.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    lines = err.strip().splitlines()
    assert launcher.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("purlin: error:") and "Traceback" not in err, err
    assert "rank 1 has shown no sign of life" in lines[0], err
    # Seconds on an idle machine; bounded well under the 600 s a command may
    # take (the bug) on a loaded one, where every process runs 3-5x slower.
    assert took < 60, f"the run took {took:.0f} s to end"
    assert not any(_alive(p) for p in ranks.values()), "a rank was left running"
    assert own_run_dirs(launcher.pid) == set()
