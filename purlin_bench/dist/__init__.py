"""The processes of one run, one per rank, finding each other: a token-guarded
store (:mod:`.store`), bounded collectives of small objects over it
(:mod:`.group`), every rank's pulse, so a wait on a stopped peer ends
(:mod:`.liveness`), rank 0's commands and the answers (:mod:`.channel`),
private shared memory on one machine (:mod:`.shm`), the rank's environment
(:mod:`.env`) and a launcher (:mod:`.launch`).

A base layer: it imports only :mod:`purlin_bench.errors` and the stdlib.
"""

from purlin_bench.dist.env import RankEnv, connect, from_environ
from purlin_bench.dist.errors import (
    Cancelled,
    DistError,
    PeerFailed,
    PeerTimeout,
    StoreRefused,
    StoreTimeout,
    StoreUnreachable,
)
from purlin_bench.dist.group import Group
from purlin_bench.dist.launch import launch
from purlin_bench.dist.shm import Segment, remove_run_dir, run_dir, run_dirs, sweep_stale
from purlin_bench.dist.store import Store, StoreServer

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
