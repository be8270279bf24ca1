"""What a rank learns from its environment, and how it joins its group.

Two launchers are understood: ours (:mod:`purlin_bench.procs.launch`), which
hands every rank the store's address and the run's token, and torchrun, which
sets only the rank variables; there rank 0 starts a store of its own and
shares its address and a fresh token over torch.distributed. Malformed
variables fail here in one line naming the variable, before any rank waits
on a peer that will never come.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from purlin_bench.procs.errors import DistError
from purlin_bench.procs.liveness import STARTUP_S
from purlin_bench.procs.group import Group
from purlin_bench.procs.store import Store, StoreServer

PURLIN, TORCHRUN = "purlin", "torchrun"
_RUN = re.compile(r"[A-Za-z0-9_.-]+")
# torchrun's rank 0 store, kept referenced here as well as by its Group, so it
# lives as long as the process is in the run (the Group closes it).
_server: StoreServer | None = None


@dataclass(frozen=True)
class RankEnv:
    rank: int
    size: int
    local_rank: int
    store: tuple[str, int] | None
    # Kept out of repr: a RankEnv printed in a log must not leak the token.
    token: bytes | None = field(repr=False)
    run: str
    device: int | None
    launcher: str


def _int(environ: Mapping[str, str], name: str, minimum: int) -> int:
    raw = environ[name]
    try:
        value = int(raw.strip())
    except ValueError:
        raise DistError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise DistError(f"{name}={raw!r} is below {minimum}")
    return value


def from_environ(environ: Mapping[str, str] = os.environ) -> RankEnv | None:
    """This process's place in a run, or None if no launcher started it."""
    ours = "PURLIN_STORE" in environ
    if not ours and ("RANK" not in environ or "WORLD_SIZE" not in environ):
        return None
    for name in ("RANK", "WORLD_SIZE"):
        if name not in environ:
            raise DistError(f"PURLIN_STORE is set but {name} is not: this process was not started by purlin's launcher")
    rank, size = _int(environ, "RANK", 0), _int(environ, "WORLD_SIZE", 1)
    if rank >= size:
        raise DistError(f"RANK={rank} is not below WORLD_SIZE={size}")
    local_rank = _int(environ, "LOCAL_RANK", 0) if "LOCAL_RANK" in environ else rank
    if local_rank >= size:
        raise DistError(f"LOCAL_RANK={local_rank} is not below WORLD_SIZE={size}")
    device = _int(environ, "PURLIN_DEVICE", 0) if environ.get("PURLIN_DEVICE", "").strip() else None
    if not ours:
        # torchrun's run id names our shm folder; keep only characters a path can hold safely.
        run = re.sub(r"[^A-Za-z0-9_.-]", "_", environ.get("TORCHELASTIC_RUN_ID", "").strip()) or TORCHRUN
        return RankEnv(rank, size, local_rank, None, None, run, device, TORCHRUN)
    host, _, port_text = environ["PURLIN_STORE"].strip().rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536:
        raise DistError(f"PURLIN_STORE={environ['PURLIN_STORE']!r} is not host:port")
    try:
        # The value itself is never echoed: it is the run's secret.
        token = bytes.fromhex(environ.get("PURLIN_TOKEN", "").strip())
    except ValueError:
        raise DistError("PURLIN_TOKEN is not hex") from None
    if not token:
        raise DistError("PURLIN_TOKEN is missing or empty")
    run = environ.get("PURLIN_RUN", "").strip()
    if not _RUN.fullmatch(run):
        raise DistError(f"PURLIN_RUN={run!r} is not a run id (letters, digits, '_', '.', '-')")
    return RankEnv(rank, size, local_rank, (host.strip("[]"), port), token, run, device, PURLIN)


def connect(env: RankEnv, timeout_s: float, silence_s: float | None = None) -> Group:
    """Join the group of ``env``'s run; every wait bounded by ``timeout_s``.

    With ``silence_s`` (the user's bound, procs/liveness.py), a wait on a
    peer ends once the peer is silent that long, and the store, which must
    greet and answer promptly, is bounded by it too: a frozen store (rank 0's
    under torchrun) or an address that never greets is then one line within
    the user's bound, and ``timeout_s`` only a backstop for the rest."""
    store_s = silence_s or timeout_s
    if env.launcher == PURLIN:
        if env.store is None or env.token is None:
            raise DistError("a purlin rank needs PURLIN_STORE and PURLIN_TOKEN")
        store = Store(env.store[0], env.store[1], env.token, timeout_s=store_s)
        return _group(store, env, timeout_s, silence_s)
    if env.launcher != TORCHRUN:
        raise DistError(f"unknown launcher {env.launcher!r}")
    return _connect_torchrun(env, timeout_s, silence_s)


def _group(store: Store, env: RankEnv, timeout_s: float, silence_s: float | None) -> Group:
    try:
        return Group(store, env.rank, env.size, env.run, timeout_s=timeout_s, silence_s=silence_s)
    except BaseException:
        store.close()  # the heartbeat's connection could not be made: do not leave this one open
        raise


def _connect_torchrun(env: RankEnv, timeout_s: float, silence_s: float | None = None) -> Group:
    global _server
    try:
        import torch.distributed as tdist
    except ImportError as exc:
        raise DistError(f"running under torchrun needs torch: {exc}") from None
    if not tdist.is_available():
        raise DistError("running under torchrun needs torch.distributed, which this torch build lacks")
    if not tdist.is_initialized():
        _check_master_addr(os.environ.get("MASTER_ADDR", ""))
        # gloo: the exchange is a few bytes on the CPU, and needs no GPU to be
        # set up yet. Its rendezvous is bounded by the user's watchdog, with
        # the start-up allowance a rank gets to join (liveness.STARTUP_S),
        # not by the 600 s a command may take: a wrong MASTER_ADDR retried
        # for ten minutes.
        rendezvous_s = min(timeout_s, (silence_s or 0.0) + STARTUP_S)
        try:
            tdist.init_process_group("gloo", timeout=timedelta(seconds=rendezvous_s))
        except (RuntimeError, ValueError, OSError) as exc:
            # torch's rendezvous errors (DistStoreError, timeouts, a bad
            # MASTER_ADDR) are multi-line RuntimeErrors: one line of it.
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise DistError(
                f"rank {env.rank}: torch.distributed could not start its gloo group ({first[:300]})"
            ) from None
    store, server, _ = store_over_torch(tdist, None, env.rank, silence_s or timeout_s, "the run's store")
    try:
        group = _group(store, env, timeout_s, silence_s)
    except BaseException:
        if server is not None:
            server.close()
        raise
    if server is not None:
        _server = server
        group.own(server)
    return group


def _check_master_addr(addr: str) -> None:
    """A MASTER_ADDR that reads as an IP address but is none (256.1.1.1) is
    one line now, not a rendezvous that retries until its timeout."""
    import ipaddress

    text = addr.strip().strip("[]")
    if text and re.fullmatch(r"[0-9.]+|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*", text):
        try:
            ipaddress.ip_address(text)
        except ValueError:
            raise DistError(f"MASTER_ADDR={addr!r} is not an IP address") from None


def store_over_torch(tdist, pg, rank: int, timeout_s: float, what: str) -> tuple[Store, StoreServer | None, bytes]:
    """A store for the ranks of torch group ``pg`` (None: the default group):
    its rank 0 serves one on loopback with a fresh token and tells the others
    where over ``pg``. This rank's client, the server (rank 0) and the token."""
    server = None
    if rank == 0:
        token = secrets.token_bytes(32)
        try:
            server = StoreServer(token, host="127.0.0.1")
            box = [server.address[0], server.address[1], token.hex()]
        except DistError as exc:
            # Tell the others why, rather than leaving them to time out in the broadcast.
            box = [None, None, str(exc)]
    else:
        box = [None, None, None]
    if pg is None:
        tdist.broadcast_object_list(box, src=0)
    else:
        tdist.broadcast_object_list(box, src=tdist.get_global_rank(pg, 0), group=pg)
    if box[0] is None:
        raise DistError(f"rank {rank}: rank 0 could not start {what}: {box[2]}")
    token = bytes.fromhex(box[2])
    try:
        store = Store(box[0], box[1], token, timeout_s=timeout_s)
    except DistError:
        if server is not None:
            server.close()
        raise
    return store, server, token


__all__ = ["PURLIN", "RankEnv", "TORCHRUN", "connect", "from_environ", "store_over_torch"]
