"""CUDA MPS: ranks as processes on one GPU, run concurrently.

Without MPS, processes on one GPU are time-sliced: two ranks' kernels never
run at once, a cross-process flag wait takes milliseconds, and a race in the
protocol hides. Under an MPS server they run concurrently (a flag round trip
takes 2-3 us on an H200), so one GPU proves the process path under real
races and gives it meaningful times.

:func:`gpu_scheduling` says which of the two a run's processes get;
:class:`PrivateMps` (``--mps``) starts an MPS control daemon of the run's own,
with private pipe and log folders, for the processes it starts, and stops it
at the end, on an error and on Ctrl-C or SIGTERM. It never talks to a daemon
it did not start. No CUDA here: the launcher itself never touches the GPU.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Mapping

from purlin_bench.base.errors import PurlinError

CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE = "/tmp/nvidia-mps"  # where CUDA looks when CUDA_MPS_PIPE_DIRECTORY is unset
START_S = 10.0  # bounds on the daemon's start and stop
CONCURRENT = "concurrent under CUDA MPS (times are meaningful)"
TIME_SLICED = "time-sliced without CUDA MPS (correctness only: times are not meaningful; run with --mps)"


def pipe_directory(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE)


def serving(environ: Mapping[str, str] | None = None) -> bool:
    """Whether an MPS control daemon answers at this process's pipe folder
    (CUDA connects its clients there at initialisation): its control socket
    exists and takes a connection (a socket left by a killed daemon refuses)."""
    path = pipe_directory(environ) / "control"
    try:
        if not stat.S_ISSOCK(path.stat().st_mode):
            return False
    except OSError:
        return False
    for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
        try:
            with socket.socket(socket.AF_UNIX, kind) as s:
                s.settimeout(1.0)
                s.connect(str(path))
            return True
        except OSError as exc:
            if exc.errno == errno.EPROTOTYPE:
                continue  # a live socket of the other kind: try it
            return False
    return True  # it exists and is of neither kind we know: alive, not stale


def gpu_scheduling(environ: Mapping[str, str] | None = None) -> str:
    """How processes sharing a GPU run: concurrently (MPS) or time-sliced."""
    return CONCURRENT if serving(environ) else TIME_SLICED


class PrivateMps:
    """An MPS control daemon for one run: ``with PrivateMps(): start ranks``.

    Its pipe and log folders are a fresh temporary folder's, exported to
    this process's environment (so the ranks it starts connect to it) and
    taken back on exit, when the daemon is told to quit and waited for."""

    def __init__(self, control: str | None = None):
        self.control = control or shutil.which(CONTROL)
        self.root: Path | None = None
        self._saved: dict[str, str | None] = {}

    def env(self) -> dict[str, str]:
        assert self.root is not None
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.root / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(self.root / "log")}

    def __enter__(self) -> "PrivateMps":
        if not self.control:
            raise PurlinError(f"--mps needs {CONTROL} (the NVIDIA driver's MPS tools) on PATH")
        previous = signal.signal(signal.SIGTERM, _terminated) if _main_thread() else None
        try:
            self.root = Path(tempfile.mkdtemp(prefix="purlin-mps-"))
            for key, value in self.env().items():
                Path(value).mkdir()
                self._saved[key] = os.environ.get(key)
            env = {**os.environ, **self.env()}
            # Its words go to a file, not a pipe: a daemon that keeps the
            # pipe open would make us wait for it to exit.
            said_path = self.root / "start.txt"
            try:
                with open(said_path, "wb") as said_file:
                    done = subprocess.run(
                        [self.control, "-d"],
                        env=env,
                        stdout=said_file,
                        stderr=said_file,
                        timeout=START_S,
                        stdin=subprocess.DEVNULL,
                    )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise PurlinError(f"--mps: {CONTROL} -d did not start: {exc}") from None
            if done.returncode != 0:
                said = said_path.read_bytes().decode(errors="replace").strip().splitlines()
                raise PurlinError(f"--mps: {CONTROL} -d failed ({said[0] if said else f'exit {done.returncode}'})")
            deadline = time.monotonic() + START_S
            while not serving(env):
                if time.monotonic() > deadline:
                    # Its log goes with its folder: say its last line now.
                    log = self.root / "log" / "control.log"
                    last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
                    raise PurlinError(
                        f"--mps: the MPS daemon did not answer within {START_S:.0f} s"
                        + (f" (its log: {last[0][:200]})" if last else "")
                    )
                time.sleep(0.05)
            os.environ.update(self.env())
            return self
        except BaseException:
            self._stop()
            raise
        finally:
            if _main_thread():
                # None: a handler installed from C, which Python cannot put back; the default then.
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    def __exit__(self, *exc) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.root is None:
            return
        env = {**os.environ, **self.env()}
        try:
            if serving(env):
                try:
                    subprocess.run(
                        [self.control],
                        env=env,
                        input=b"quit\n",
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        timeout=START_S,
                    )
                except (OSError, subprocess.TimeoutExpired):
                    pass
                deadline = time.monotonic() + START_S
                while serving(env) and time.monotonic() < deadline:
                    time.sleep(0.05)
            _kill_left(str(self.root / "pipe"))
        finally:
            # Even when a second Ctrl-C lands above: the environment back as
            # it was, and no folder of ours left.
            for key, value in self._saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


def _kill_left(pipe: str) -> None:
    """Kill any MPS daemon or server that a quit left behind: only those
    whose environment names our private pipe folder."""
    mark = f"CUDA_MPS_PIPE_DIRECTORY={pipe}".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                if (entry / "comm").read_text().strip().startswith("nvidia-cuda-mps") and int(
                    entry.name
                ) != os.getpid():
                    os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
