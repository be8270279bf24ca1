"""One process per rank: how a run's processes find, hear and share with each other.

A token-guarded
store (:mod:`.store`), bounded collectives of small objects over it
(:mod:`.group`), every rank's pulse, so a wait on a stopped peer ends
(:mod:`.liveness`), rank 0's commands and the answers (:mod:`.channel`),
private shared memory on one machine (:mod:`.shm`), the rank's environment
(:mod:`.env`) and a launcher (:mod:`.launch`).

A base layer: it imports only :mod:`purlin_bench.base.errors` and the stdlib.
"""

from purlin_bench.procs.env import RankEnv, connect, from_environ
from purlin_bench.procs.errors import (
    Cancelled,
    DistError,
    PeerFailed,
    PeerTimeout,
    StoreRefused,
    StoreTimeout,
    StoreUnreachable,
)
from purlin_bench.procs.group import Group
from purlin_bench.procs.launch import launch
from purlin_bench.procs.shm import Segment, remove_run_dir, run_dir, run_dirs, sweep_stale
from purlin_bench.procs.store import Store, StoreServer

__all__ = [
    "Cancelled",
    "DistError",
    "Group",
    "PeerFailed",
    "PeerTimeout",
    "RankEnv",
    "Segment",
    "Store",
    "StoreRefused",
    "StoreServer",
    "StoreTimeout",
    "StoreUnreachable",
    "connect",
    "from_environ",
    "launch",
    "remove_run_dir",
    "run_dir",
    "run_dirs",
    "sweep_stale",
]
