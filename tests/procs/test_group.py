"""purlin_bench.procs: the store, its token, and bounded collectives across
real processes (the launcher, shared memory and the rank environment:
tests/procs/test_launch.py, which runs this file's child program)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from purlin_bench.procs import (
    DistError,
    Group,
    PeerTimeout,
    Store,
    StoreRefused,
    StoreServer,
    StoreTimeout,
    StoreUnreachable,
)

# One program for every rank of every scenario: argv is scenario, timeout, out folder.
CHILD = r"""
import json, os, signal, sys, time
from purlin_bench.procs import env as denv, errors, shm, Segment

scenario, timeout, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
e = denv.from_environ()
with open(os.path.join(out, f"pid{e.rank}"), "w") as f:
    f.write(str(os.getpid()))

def report(obj):
    with open(os.path.join(out, f"rank{e.rank}.json"), "w") as f:
        json.dump(obj, f)

g = denv.connect(e, timeout)
start = time.monotonic()
try:
    if scenario == "collectives":
        g.barrier("start")
        b = g.broadcast({"from": g.rank}, "bcast", root=1)
        a = g.allgather(g.rank * 10, "ag")
        ga = g.gather(f"r{g.rank}", "ga", root=2)
        report({"b": b, "a": a, "g": ga})
    elif scenario == "many":
        for i in range(150):
            g.barrier("b")
            assert g.broadcast(i, "bc", root=i % g.size) == i
            assert g.allgather(g.rank + i, "ag") == [r + i for r in range(g.size)]
            got = g.gather(g.rank, "ga", root=(i + 1) % g.size)
            assert got is None or got == list(range(g.size))
        report({"ok": True})
    elif scenario == "abort":
        if g.rank == 0:
            time.sleep(0.5)
            g.abort("rank 0 gave up: boom")
            report({"ok": True})
        else:
            g.barrier("never")
    elif scenario == "diverge":
        g.barrier(f"step-{g.rank}")
    elif scenario == "launch_ok":
        d = shm.run_dir(e.run)
        seg = Segment.create(d, f"seg{e.rank}", 64) if e.rank == 0 else None
        a = g.allgather([e.rank, e.device, e.launcher], "devs")
        g.barrier("end")
        print("hello from rank", e.rank, json.dumps(a), flush=True)
        report({"dir": str(d)})
    elif scenario == "launch_kill":
        g.barrier("ready")
        if g.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        g.barrier("after")
    elif scenario == "hang":
        if g.rank == 0:  # a folder named as backends/procs.py names it: the run id and a random part
            report({"dir": str(shm.run_dir(f"{e.run}-{os.urandom(4).hex()}"))})
        g.barrier("ready")
        time.sleep(600)
    elif scenario == "launch_kill0":
        if g.rank == 0:
            report({"dir": str(shm.run_dir(f"{e.run}-{os.urandom(4).hex()}"))})
        g.barrier("ready")
        if g.rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # before any cleanup of its own
        g.barrier("after")
    elif scenario == "launch_flood":
        g.barrier("ready")  # every rank connected before the flood
        if g.rank == 0:
            with open(os.path.join(out, "store.tmp"), "w") as f:
                f.write(os.environ["PURLIN_STORE"])
            os.replace(os.path.join(out, "store.tmp"), os.path.join(out, "store"))
        if g.rank == 1:
            while not os.path.exists(os.path.join(out, "go")) and time.monotonic() - start < timeout:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGKILL)
        g.barrier("after")
    else:
        raise SystemExit(f"unknown scenario {scenario}")
except errors.DistError as exc:
    report({"error": type(exc).__name__, "message": str(exc), "elapsed": time.monotonic() - start})
    sys.exit(3)
finally:
    g.close()
"""


def token() -> bytes:
    return secrets.token_bytes(32)


def spawn(server: StoreServer, tok: bytes, ranks, size: int, scenario: str, timeout: float, out: Path, run: str = "t"):
    host, port = server.address
    procs = []
    for rank in ranks:
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE=str(size),
            LOCAL_RANK=str(rank),
            PURLIN_STORE=f"{host}:{port}",
            PURLIN_TOKEN=tok.hex(),
            PURLIN_RUN=run,
        )
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, scenario, str(timeout), str(out)], env=env))
    return procs


def finish(procs, limit: float = 25.0) -> list[int]:
    deadline = time.monotonic() + limit
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            codes.append(None)
    return codes


def result(out: Path, rank: int) -> dict:
    return json.loads((out / f"rank{rank}.json").read_text())


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# -- the store ----------------------------------------------------------------


def test_store_set_get_add_delete():
    tok = token()
    with StoreServer(tok) as server, Store(*server.address, tok) as store:
        assert server.address[0] == "127.0.0.1"
        store.set("a", b"\x00\x01binary")
        assert store.get("a", 1.0) == b"\x00\x01binary"
        assert store.try_get("missing") is None
        assert store.add("n") == 1 and store.add("n", 5) == 6 and store.add("n", -2) == 4
        store.delete("a")
        store.delete("never-there")
        assert store.try_get("a") is None
        assert server.keys() == ["n"]
        store.set("s", b"text")
        with pytest.raises(DistError, match="not a counter"):
            store.add("s")


@pytest.mark.timeout(30)
def test_get_waits_server_side_and_times_out_naming_the_key():
    tok = token()
    with StoreServer(tok) as server, Store(*server.address, tok) as a, Store(*server.address, tok) as b:
        t0 = time.monotonic()
        with pytest.raises(StoreTimeout, match="'no/such/key'"):
            a.get("no/such/key", 0.5)
        assert 0.4 < time.monotonic() - t0 < 3.0
        import threading

        threading.Timer(0.3, b.set, args=("late", b"v")).start()
        assert a.get("late", 5.0) == b"v"


@pytest.mark.timeout(30)
def test_wrong_token_is_refused_and_the_server_keeps_serving():
    tok = token()
    with StoreServer(tok) as server, Store(*server.address, tok) as good:
        good.set("k", b"1")
        port = server.address[1]
        refused = f"the store at 127.0.0.1:{port} refused this process: it does not hold the run's token"
        with pytest.raises(StoreRefused, match=refused):
            Store(*server.address, token())
        assert good.get("k", 1.0) == b"1"
        with Store(*server.address, tok) as again:
            assert again.try_get("k") == b"1"


@pytest.mark.timeout(30)
def test_garbage_peers_are_dropped_without_breaking_the_server():
    tok = token()
    with StoreServer(tok) as server, Store(*server.address, tok) as good:
        # Unauthenticated garbage: read the nonce, answer junk, get refused and closed.
        with socket.create_connection(server.address, timeout=5) as raw:
            assert len(raw.recv(32)) == 32
            raw.sendall(os.urandom(32))
            assert raw.recv(1) == b"\x00"
            assert raw.recv(1) == b""
        # A blob of junk, sent without waiting for the nonce.
        with socket.create_connection(server.address, timeout=5) as raw:
            raw.sendall(b"\xff" * 65536)
            try:
                while raw.recv(4096):
                    pass
            except ConnectionResetError:
                pass  # closed with junk unread: the kernel resets, as it should
        # A peer that says nothing must not hold anyone else up.
        silent = socket.create_connection(server.address, timeout=5)
        # One that connects and hangs up at once.
        socket.create_connection(server.address, timeout=5).close()
        # An authenticated peer that sends a frame with an unknown op, then a huge length.
        with Store(*server.address, tok) as bad:
            bad._sock.sendall(b"\x09" + (2**32 - 1).to_bytes(4, "big") * 2)
            with pytest.raises(StoreUnreachable, match="lost the run's store"):
                bad.try_get("k")
        good.set("k", b"still here")
        assert good.get("k", 1.0) == b"still here"
        silent.close()


@pytest.mark.timeout(30)
def test_a_flood_of_silent_connections_never_cuts_off_a_rank_and_a_joiner_gets_in_once_it_ebbs():
    import threading

    from purlin_bench.procs.store import MAX_PENDING

    tok = token()
    with StoreServer(tok) as server, Store(*server.address, tok) as good:
        flood = [socket.create_connection(server.address, timeout=5) for _ in range(MAX_PENDING + 40)]
        time.sleep(0.3)  # let the server take them: MAX_PENDING wait for a proof, the rest are closed
        assert sum(1 for c in flood if c.recv(32) == b"") >= 40
        good.set("k", b"1")  # the authenticated rank keeps its slot
        threading.Timer(1.0, lambda: [c.close() for c in flood]).start()
        start = time.monotonic()
        with Store(*server.address, tok, timeout_s=10) as joiner:  # turned away while full, then in
            assert joiner.get("k", 1.0) == b"1"
        assert 0.8 < time.monotonic() - start < 5
        with pytest.raises(StoreUnreachable, match="closed every connection before greeting for 0.5 s"):
            flood = [socket.create_connection(server.address, timeout=5) for _ in range(MAX_PENDING)]
            time.sleep(0.3)
            try:
                Store(*server.address, tok, timeout_s=0.5)
            finally:
                [c.close() for c in flood]


@pytest.mark.timeout(30)
def test_unreachable_and_lost_stores_say_so():
    tok = token()
    server = StoreServer(tok)
    host, port = server.address
    store = Store(host, port, tok, timeout_s=5)
    server.close()
    lost = f"lost the run's store at {host}:{port}: its launcher or rank 0 has exited"
    with pytest.raises(StoreUnreachable, match=lost):
        store.get("k", 2.0)
    with pytest.raises(StoreUnreachable, match=f"{host}:{port}"):
        Store(host, port, tok, timeout_s=2)


# -- the group, across real processes ------------------------------------------


@pytest.mark.timeout(60)
def test_collectives_across_three_processes(tmp_path):
    tok = token()
    with StoreServer(tok) as server:
        assert finish(spawn(server, tok, range(3), 3, "collectives", 20, tmp_path)) == [0, 0, 0]
    for rank in range(3):
        got = result(tmp_path, rank)
        assert got["b"] == {"from": 1} and got["a"] == [0, 10, 20]
        assert got["g"] == (["r0", "r1", "r2"] if rank == 2 else None)


@pytest.mark.timeout(60)
def test_a_missing_rank_times_the_others_out_naming_it_and_the_step(tmp_path):
    tok = token()
    with StoreServer(tok) as server:
        t0 = time.monotonic()
        assert finish(spawn(server, tok, [1, 2], 3, "collectives", 2, tmp_path)) == [3, 3]
        assert time.monotonic() - t0 < 15
    for rank in (1, 2):
        got = result(tmp_path, rank)
        assert got["error"] == "PeerTimeout"
        assert got["message"] == f"rank {rank}: waited 2 s at step 'start' for rank(s) 0 (never arrived)"
        assert 1.9 < got["elapsed"] < 4.0


@pytest.mark.timeout(60)
def test_abort_reaches_every_waiting_rank_as_peer_failed(tmp_path):
    tok = token()
    with StoreServer(tok) as server:
        assert finish(spawn(server, tok, range(3), 3, "abort", 30, tmp_path)) == [0, 3, 3]
    for rank in (1, 2):
        got = result(tmp_path, rank)
        assert got["error"] == "PeerFailed" and got["message"].endswith(": rank 0 gave up: boom")
        assert "stopped waiting at step" in got["message"]
        assert got["elapsed"] < 5


@pytest.mark.timeout(60)
def test_ranks_at_different_steps_fail_fast_as_diverged(tmp_path):
    tok = token()
    with StoreServer(tok) as server:
        assert finish(spawn(server, tok, range(2), 2, "diverge", 30, tmp_path)) == [3, 3]
    got = result(tmp_path, 0)
    assert "diverged at call 1" in got["message"] and "'step-1'" in got["message"]
    assert got["elapsed"] < 5


@pytest.mark.timeout(60)
def test_keys_are_deleted_once_read_so_the_store_stays_small(tmp_path):
    tok = token()
    with StoreServer(tok) as server:
        assert finish(spawn(server, tok, range(3), 3, "many", 20, tmp_path), limit=50) == [0, 0, 0]
        # 600 calls a rank; left: where each rank last was, and the leave counter.
        assert server.keys() == ["t/at/0", "t/at/1", "t/at/2", "t/closed"]


@pytest.mark.timeout(60)
def test_two_concurrent_runs_do_not_interfere(tmp_path):
    tok_a, tok_b = token(), token()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with StoreServer(tok_a) as a, StoreServer(tok_b) as b:
        with pytest.raises(StoreRefused):
            Store(*a.address, tok_b)
        procs = spawn(a, tok_a, range(3), 3, "collectives", 20, tmp_path / "a")
        procs += spawn(b, tok_b, range(2), 2, "many", 20, tmp_path / "b")
        assert finish(procs, limit=50) == [0] * 5
    assert result(tmp_path / "a", 0)["a"] == [0, 10, 20]
    assert result(tmp_path / "b", 1) == {"ok": True}


def test_group_refuses_bad_arguments():
    tok = token()
    with StoreServer(tok) as server, Store(*server.address, tok) as store:
        with pytest.raises(DistError, match="rank 3"):
            Group(store, 3, 3, "r")
        g = Group(store, 0, 1, "r", timeout_s=1)
        assert g.allgather("x", "one") == ["x"] and g.gather(1, "g") == [1]
        with pytest.raises(DistError, match="root 1"):
            g.broadcast(1, "b", root=1)


@pytest.mark.timeout(30)
def test_a_timeout_says_where_a_late_rank_was_last_seen():
    import threading

    tok = token()
    with StoreServer(tok) as server, Store(*server.address, tok) as s0, Store(*server.address, tok) as s1:
        g0, g1 = Group(s0, 0, 2, "r", timeout_s=5), Group(s1, 1, 2, "r", timeout_s=5)
        other = threading.Thread(target=g1.barrier, args=("a",))
        other.start()
        g0.barrier("a")
        other.join()
        with pytest.raises(PeerTimeout) as info:
            g0.barrier("b", timeout_s=0.5)
        assert str(info.value) == (
            "rank 0: waited 0.5 s at step 'b' for rank(s) 1 (1 last seen at step 'a', call 1; this is call 2)"
        )


def test_a_cancelled_scope_stops_waits_in_it_and_the_next_scope_lines_up_again():
    """A rank that fails a command's work (before the barrier the others are
    in) cancels the scope: they stop at once with Cancelled, not at the
    timeout; the next scope's calls are numbered afresh on every rank, so the
    call the failed rank skipped does not shift them."""
    import threading

    from purlin_bench.procs import Cancelled

    tok = b"s" * 32
    with StoreServer(tok) as server:
        groups = [Group(Store(*server.address, tok), r, 3, "scoped", timeout_s=20) for r in range(3)]
        seen: dict[int, BaseException | None] = {}

        def rank(r: int) -> None:
            g = groups[r]
            g.scope("c1", cancel="scoped/fail/1")
            try:
                if r == 2:
                    g.cancel("rank 2: out of memory")  # fails before its barrier
                    raise Cancelled("mine")
                g.barrier("created")
                seen[r] = None
            except BaseException as exc:  # noqa: BLE001 - recorded for the asserts
                seen[r] = exc
            g.scope("c2", cancel="scoped/fail/2")
            g.barrier("next")

        start = time.monotonic()
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
        [t.start() for t in threads]
        [t.join(30) for t in threads]
        assert time.monotonic() - start < 5
        assert all(isinstance(seen[r], Cancelled) for r in (0, 1)), seen
        assert "rank 2: out of memory" in str(seen[0]) and "'created'" in str(seen[0])
        for g in groups:
            assert g.cancelled() is None  # scope c2 is not cancelled
            g.close()
