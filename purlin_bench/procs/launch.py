"""Start the ranks of one run on this machine and see every one of them out.

The launcher owns the run's store (so it outlives every rank) and its token
(fresh per run, handed to the children only through their environment). When
a rank fails it says so in one line, aborts the run through the store so the
others stop at their next wait with their own named error, gives them a grace
period, and then terminates what is left. Every wait here is bounded: the
launcher returns, and nothing it started is left running when it does.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from purlin_bench.procs.errors import DistError
from purlin_bench.procs.group import abort_key
from purlin_bench.procs.shm import remove_run_dir, run_dirs, sweep_stale
from purlin_bench.procs.store import StoreServer

POLL_S = 0.05
KILL_AFTER_S = 3.0
REAP_S = 5.0


def _describe(rank: int, code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"rank {rank} was killed by {name}"
    return f"rank {rank} exited with code {code}"


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def _signal_groups(children: list[subprocess.Popen], sig: int) -> None:
    # Each child leads its own process group, so whatever it started goes too.
    for child in children:
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone already


def _stop(children: list[subprocess.Popen], sig: int) -> None:
    """``sig`` to every rank still running, SIGKILL after KILL_AFTER_S, reap."""
    alive = [c for c in children if c.poll() is None]
    if alive:
        _signal_groups(alive, sig)
        # A stopped rank acts on ``sig`` only once continued.
        _signal_groups(alive, signal.SIGCONT)
        deadline = time.monotonic() + KILL_AFTER_S
        while time.monotonic() < deadline and any(c.poll() is None for c in alive):
            time.sleep(POLL_S)
    # Also the groups of ranks that exited: a grandchild may outlive its rank.
    _signal_groups(children, signal.SIGKILL)
    for child in children:
        try:
            child.wait(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            pass  # unkillable (stuck in the kernel): do not hang on it


def launch(
    child_argv: list[str],
    procs: int,
    devices: list[int] | None = None,
    grace_s: float = 15.0,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run ``procs`` ranks of ``python child_argv...``; 0 if all exit 0, else
    the first failure's code (128+signal for a signal; 130/143 when this
    process is interrupted or terminated)."""
    if not isinstance(procs, int) or procs < 1:
        raise DistError(f"procs must be at least 1, not {procs!r}")
    if devices is not None and not devices:
        raise DistError("an empty device list: give at least one device, or none")
    sweep_stale()
    token = secrets.token_bytes(32)
    # The launcher's pid first: a run's /dev/shm folders then say which
    # process started them, and a caller (a test) can find its own runs'.
    run = f"{os.getpid()}-{secrets.token_hex(6)}"
    base = dict(os.environ if environ is None else environ)
    stopped: list[int] = []
    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        # Only the main thread may install handlers; launched elsewhere (a
        # test's thread) the caller's own handling stays in charge.
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: stopped.append(signum))
    children: list[subprocess.Popen] = []
    try:
        with StoreServer(token) as server:
            host, port = server.address
            for rank in range(procs):
                env = dict(base)
                env.update(
                    RANK=str(rank), WORLD_SIZE=str(procs), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(procs),
                    PURLIN_STORE=f"{host}:{port}", PURLIN_TOKEN=token.hex(), PURLIN_RUN=run,
                )
                env.pop("PURLIN_DEVICE", None)
                if devices is not None:
                    env["PURLIN_DEVICE"] = str(devices[rank % len(devices)])
                quiet = rank != 0
                try:
                    children.append(subprocess.Popen(
                        [sys.executable, *child_argv], env=env, start_new_session=True,
                        stdin=subprocess.DEVNULL if quiet else None, stdout=subprocess.DEVNULL if quiet else None,
                    ))
                except OSError as exc:
                    raise DistError(f"cannot start rank {rank}: {exc.strerror or exc}") from None
            return _supervise(children, server, run, grace_s, stopped)
    finally:
        _stop(children, signal.SIGTERM)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # Every rank is gone: whatever folders of this run they left (rank 0
        # killed before its own cleanup) go now, whatever suffix they carry.
        for path in run_dirs(run):
            remove_run_dir(path)


def _supervise(children, server, run: str, grace_s: float, stopped: list[int]) -> int:
    codes: dict[int, int] = {}
    failure: int | None = None
    deadline = 0.0
    lingering: float | None = None
    while True:
        if stopped:
            sig = stopped[0]
            _say(f"got {signal.Signals(sig).name}, stopping {len(children)} rank(s)")
            # SIGINT is passed on as SIGINT so Python ranks unwind through their finally blocks.
            _stop(children, signal.SIGINT if sig == signal.SIGINT else signal.SIGTERM)
            return 128 + sig
        for rank, child in enumerate(children):
            code = child.poll()
            if code is None or rank in codes:
                continue
            codes[rank] = code
            if code != 0 and failure is None:
                failure = _exit_code(code)
                deadline = time.monotonic() + grace_s
                # Rank 0 runs the command and has said why it failed, in one
                # line; a signal, or another rank's failure, only we can say.
                if rank != 0 or code < 0:
                    _say(_describe(rank, code))
                _abort(server, run, f"{_describe(rank, code)} (the launcher stopped the run)")
        if len(codes) == len(children):
            return failure or 0
        if 0 in codes and failure is None and lingering is None:
            # Rank 0 ran the command and told the others to stop; one that
            # lingers past the grace period is stopped.
            lingering = time.monotonic() + grace_s
        # A stopped rank (SIGSTOP) can neither see the abort nor exit: the
        # grace period is for ranks that can still say why they stopped.
        frozen = [r for r, c in enumerate(children) if r not in codes and _stopped(c.pid)]
        all_frozen = len(frozen) == len(children) - len(codes)
        left = len(children) - len(codes)
        if failure is not None and (all_frozen or time.monotonic() >= deadline):
            if not all_frozen:  # the failing rank named the cause; stopped ranks add nothing to it
                _say(f"stopping {left} rank(s) still running {grace_s:g} s after the failure")
            _stop(children, signal.SIGTERM)
            return failure
        if failure is None and lingering is not None and (all_frozen or time.monotonic() >= lingering):
            if all_frozen:
                _say(f"rank(s) {', '.join(map(str, frozen))} stopped (SIGSTOP?) after rank 0 finished: ending them")
            else:
                _say(f"stopping {left} rank(s) still running {grace_s:g} s after rank 0 finished")
            _stop(children, signal.SIGTERM)
            return 1
        time.sleep(POLL_S)


def _say(line: str) -> None:
    print(f"purlin: {line}", file=sys.stderr, flush=True)


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal or a tracer (Linux; elsewhere
    never: there the grace period ends it, as before)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("T", "t")


def _abort(server: StoreServer, run: str, message: str) -> None:
    """Set the run's abort key, so ranks blocked on the failed one stop now
    instead of at their own timeout. In this process, not through a
    connection: connections that never prove the token can fill every slot
    a newcomer needs, and the abort must not wait for them to time out."""
    server.set(abort_key(run), message.encode())


__all__ = ["launch"]
