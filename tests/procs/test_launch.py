"""The launcher, private shared memory, and what a rank reads from its
environment (purlin_bench.procs): real processes, no GPU. The store and the
group are tests/procs/test_group.py's; this file shares its child program."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from purlin_bench.procs import (
    DistError,
    RankEnv,
    Segment,
    Store,
    StoreUnreachable,
    connect,
    from_environ,
    launch,
    run_dir,
    run_dirs,
    sweep_stale,
)
from purlin_bench.procs.shm import remove_run_dir
from tests.procs.test_group import CHILD, gone, result, token


# -- shared memory --------------------------------------------------------------


SHM_CHILD = r"""
import sys
from pathlib import Path
from purlin_bench.procs import Segment
seg = Segment.open(Path(sys.argv[1]), "buf", 16)
assert bytes(seg.buffer[:4]) == b"ping"
seg.buffer[4:8] = b"pong"
seg.close()
"""


def test_segments_share_bytes_across_processes_and_are_private():
    run = f"test{secrets.token_hex(4)}"
    d = run_dir(run)
    try:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700 and d.name == f"purlin-{os.getuid()}-{run}"
        assert (d / "owner").read_text() == str(os.getpid())
        assert run_dir(run) == d and run_dirs(run) == [d]
        seg = Segment.create(d, "buf", 16)
        assert stat.S_IMODE(os.stat(d / "buf").st_mode) == 0o600
        seg.buffer[:4] = b"ping"
        subprocess.run([sys.executable, "-c", SHM_CHILD, str(d)], check=True, timeout=20)
        assert bytes(seg.buffer[4:8]) == b"pong"
        seg.unlink()
        assert not (d / "buf").exists()
        seg.buffer[0:1] = b"P"  # the mapping outlives the file
        assert bytes(seg.buffer[:8]) == b"Pingpong"
        seg.close()
        first = Segment.create(d, "dup", 8)
        with pytest.raises(DistError, match="cannot create"):
            Segment.create(d, "dup", 8)
        first.close()
        with pytest.raises(DistError, match="reserved"):
            Segment.create(d, "owner", 8)
        for bad in ("../x", "a/b", "", ".."):
            with pytest.raises(DistError, match="not a safe name"):
                Segment.create(d, bad, 8)
    finally:
        remove_run_dir(d)
    assert not d.exists() and run_dirs(run) == []


def test_sweep_stale_removes_only_dirs_whose_owner_is_gone():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale, live = run_dir(f"stale{secrets.token_hex(4)}"), run_dir(f"live{secrets.token_hex(4)}")
    try:
        (stale / "owner").write_text(str(dead.pid))
        assert sweep_stale() >= 1
        assert not stale.exists() and live.exists()
    finally:
        remove_run_dir(stale)
        remove_run_dir(live)


# -- the environment --------------------------------------------------------------


def test_from_environ_reads_purlin_and_torchrun_variables():
    assert from_environ({}) is None
    assert from_environ({"RANK": "0"}) is None
    tok = token()
    env = from_environ(
        {
            "RANK": "1",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "PURLIN_STORE": "127.0.0.1:5000",
            "PURLIN_TOKEN": tok.hex(),
            "PURLIN_RUN": "abc123",
            "PURLIN_DEVICE": "3",
        }
    )
    assert env == RankEnv(1, 4, 1, ("127.0.0.1", 5000), tok, "abc123", 3, "purlin")
    assert tok.hex() not in repr(env)
    tr = from_environ(
        {"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "2", "MASTER_ADDR": "x", "TORCHELASTIC_RUN_ID": "a/b"}
    )
    assert tr == RankEnv(2, 3, 2, None, None, "a_b", None, "torchrun")
    assert from_environ({"RANK": "0", "WORLD_SIZE": "1"}).run == "torchrun"


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"RANK": "x"}, "RANK"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
        ({"RANK": "4"}, "RANK=4 is not below WORLD_SIZE=4"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK"),
        ({"PURLIN_STORE": "nowhere"}, "PURLIN_STORE"),
        ({"PURLIN_STORE": "h:99999"}, "PURLIN_STORE"),
        ({"PURLIN_TOKEN": "zz"}, "PURLIN_TOKEN"),
        ({"PURLIN_TOKEN": ""}, "PURLIN_TOKEN"),
        ({"PURLIN_RUN": "../x"}, "PURLIN_RUN"),
        ({"PURLIN_DEVICE": "gpu0"}, "PURLIN_DEVICE"),
    ],
)
def test_from_environ_refuses_malformed_values_in_one_line(change, names):
    base = {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "PURLIN_STORE": "127.0.0.1:5000",
        "PURLIN_TOKEN": "ab" * 32,
        "PURLIN_RUN": "r",
    }
    with pytest.raises(DistError) as info:
        from_environ({**base, **change})
    assert names in str(info.value) and "\n" not in str(info.value) and "ab" * 32 not in str(info.value)


def test_torchrun_without_torch_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    with pytest.raises(DistError, match="running under torchrun needs torch"):
        connect(from_environ({"RANK": "0", "WORLD_SIZE": "1"}), 5)


# -- the launcher -----------------------------------------------------------------


def child_argv(scenario: str, timeout: float, out: Path) -> list[str]:
    return ["-c", CHILD, scenario, str(timeout), str(out)]


@pytest.mark.timeout(60)
def test_launch_runs_every_rank_and_only_rank_0_prints(tmp_path, capfd):
    assert launch(child_argv("launch_ok", 20, tmp_path), 3, devices=[4, 5]) == 0
    out = capfd.readouterr().out
    assert out.splitlines() == ['hello from rank 0 [[0, 4, "purlin"], [1, 5, "purlin"], [2, 4, "purlin"]]']
    # The run's shared-memory folder went with the run.
    assert not Path(result(tmp_path, 0)["dir"]).exists()


@pytest.mark.timeout(60)
def test_launch_stops_the_others_when_a_rank_is_killed(tmp_path, capfd):
    t0 = time.monotonic()
    assert launch(child_argv("launch_kill", 30, tmp_path), 3, grace_s=10) == 128 + signal.SIGKILL
    assert time.monotonic() - t0 < 10  # the abort stops the others well before the grace runs out
    assert "purlin: rank 1 was killed by SIGKILL" in capfd.readouterr().err
    for rank in (0, 2):
        got = result(tmp_path, rank)
        assert got["error"] == "PeerFailed" and "rank 1 was killed by SIGKILL" in got["message"]
    assert all(gone(int((tmp_path / f"pid{r}").read_text())) for r in range(3))


@pytest.mark.timeout(60)
def test_launch_terminates_ranks_that_outstay_the_grace(tmp_path, capfd):
    # Ranks that sleep instead of waiting on the store never see the abort.
    code = (
        "import os, sys, time\n"
        "open(os.path.join(sys.argv[1], 'pid' + os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "if os.environ['RANK'] == '2': sys.exit(7)\ntime.sleep(600)"
    )
    t0 = time.monotonic()
    assert launch(["-c", code, str(tmp_path)], 3, grace_s=1) == 7
    assert time.monotonic() - t0 < 10
    err = capfd.readouterr().err
    assert "purlin: rank 2 exited with code 7" in err and "stopping 2 rank(s)" in err
    assert all(gone(int((tmp_path / f"pid{r}").read_text())) for r in range(3))


LAUNCHER = r"""
import sys
from purlin_bench.procs import launch
sys.exit(launch(sys.argv[1:], 2))
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_launcher_stops_every_rank_and_leaves_no_folder(tmp_path, sig):
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, *child_argv("hang", 30, tmp_path)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not (tmp_path / "rank0.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(sig)
    err = proc.communicate(timeout=20)[1]
    assert proc.returncode == 128 + sig and f"purlin: got {sig.name}".encode() in err
    assert all(gone(int((tmp_path / f"pid{r}").read_text())) for r in range(2))
    # Rank 0 was terminated before its own cleanup: the launcher removed the
    # folder it made, though its name carries a suffix after the run id.
    folder = Path(result(tmp_path, 0)["dir"])
    assert not folder.exists(), f"{folder} was left behind"
    assert folder.name.startswith(f"purlin-{os.getuid()}-{proc.pid}-")  # whose it was, in its name


@pytest.mark.timeout(60)
def test_rank_0_killed_leaves_no_folder_of_its_run(tmp_path, capfd):
    assert launch(child_argv("launch_kill0", 30, tmp_path), 3, grace_s=10) == 128 + signal.SIGKILL
    assert "purlin: rank 0 was killed by SIGKILL" in capfd.readouterr().err
    folder = Path(result(tmp_path, 0)["dir"])
    assert not folder.exists(), f"{folder} was left behind"
    for rank in (1, 2):
        assert result(tmp_path, rank)["error"] == "PeerFailed"


@pytest.mark.timeout(60)
def test_connections_that_never_prove_the_token_do_not_delay_the_abort(tmp_path, capfd):
    """300 connections without the token fill the store's slots for
    newcomers; the launcher's abort after a rank dies must not need one."""
    flood: list[socket.socket] = []
    went: list[float] = []
    done = threading.Event()

    def flood_then_go() -> None:
        deadline = time.monotonic() + 20
        while not (tmp_path / "store").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        host, _, port = (tmp_path / "store").read_text().rpartition(":")
        # Held, and more made as the server drops the ones that never answer.
        while not done.is_set() and time.monotonic() < deadline and len(flood) < 1000:
            try:
                flood.append(socket.create_connection((host, int(port)), timeout=0.2))
            except OSError:
                pass
            if len(flood) >= 300 and not went:
                went.append(time.monotonic())
                (tmp_path / "go").write_text("")

    thread = threading.Thread(target=flood_then_go, daemon=True)
    thread.start()
    try:
        assert launch(child_argv("launch_flood", 30, tmp_path), 3, grace_s=20) == 128 + signal.SIGKILL
        took = time.monotonic() - went[0]
    finally:
        done.set()
        thread.join(10)
        for conn in flood:
            conn.close()
    err = capfd.readouterr().err
    assert "still running" not in err, "the abort did not reach the ranks: the grace period ended them"
    assert took < 8, f"the run took {took:.0f} s to stop after the rank died"
    for rank in (0, 2):
        assert result(tmp_path, rank)["error"] == "PeerFailed"


def test_a_failed_torch_rendezvous_is_one_line_naming_the_rank(monkeypatch):
    import types

    def refuse(backend, timeout):
        raise RuntimeError(
            "DistStoreError: timed out after 5s waiting for clients. 1/2 clients joined.\n  more detail\n"
        )

    fake = types.ModuleType("torch.distributed")
    fake.is_available, fake.is_initialized, fake.init_process_group = (lambda: True), (lambda: False), refuse
    torch = types.ModuleType("torch")
    torch.distributed = fake
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    with pytest.raises(DistError) as err:
        connect(from_environ({"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "job8"}), 5)
    assert "rank 1" in str(err.value) and "1/2 clients joined" in str(err.value) and "\n" not in str(err.value)


def test_torchrun_rank_0_serves_the_store_and_its_group_closes_it(monkeypatch):
    """The torchrun path with a stand-in for torch.distributed (one rank)."""
    import types

    calls = []
    fake = types.ModuleType("torch.distributed")
    fake.is_available = lambda: True
    fake.is_initialized = lambda: False
    fake.init_process_group = lambda backend, timeout: calls.append(backend)
    fake.broadcast_object_list = lambda box, src: calls.append((len(box), src))
    torch = types.ModuleType("torch")
    torch.distributed = fake
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    from purlin_bench.procs import env as denv

    group = connect(from_environ({"RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "job7"}), 5)
    assert calls == ["gloo", (3, 0)] and group.run == "job7"
    assert group.allgather("x", "one") == ["x"]
    server = denv._server
    assert server is not None and server.address[0] == "127.0.0.1"
    group.close()
    with pytest.raises(StoreUnreachable):
        Store(*server.address, b"any", timeout_s=2)
