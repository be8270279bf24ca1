"""Which worker runs a trial, and whether it is still alive.

Every trial records its worker (host, pid, and the process's start time, so a
reused pid is not mistaken for the dead worker). A RUNNING trial whose worker
ran on this host and is gone was interrupted (SIGKILL, a crash): the tuner
marks it failed-and-interrupted at once, so a restarted tune neither waits for
it nor counts it. Workers on other hosts are covered by Optuna's heartbeat.
"""

from __future__ import annotations

import os
import socket
from typing import Any


def process_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 2 (the command) may hold spaces and parentheses: split after its last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] == "Z":  # a zombie has exited, only not been reaped
        return None
    return int(fields[19])


def this_worker() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": process_start(pid)}


def is_gone(worker: Any) -> bool:
    """True only when ``worker`` ran on this host and has certainly exited."""
    if not isinstance(worker, dict) or worker.get("host") != socket.gethostname():
        return False
    pid = worker.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # exists, owned by someone else
    start = process_start(pid)
    if start is None:
        return os.path.exists("/proc/self/stat")  # on Linux: a zombie, exited
    recorded = worker.get("start")
    return recorded is not None and recorded != start
