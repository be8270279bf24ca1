"""Private shared memory for the processes of one run on one machine.

A run's segments are files in a directory only this user can enter
(``purlin-{uid}-{run}``, mode 0700, files 0600), under ``/dev/shm`` where it
exists so the pages never touch a disk. Files, not POSIX ``shm_open`` names,
because a directory gives a run one place to clean up and a mode another user
cannot get around by guessing a name. A run killed before its cleanup leaves
its directory behind; :func:`sweep_stale` removes those whose creator is gone.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from purlin_bench.procs.errors import DistError

_SAFE = re.compile(r"[A-Za-z0-9_.-]+")
OWNER = "owner"


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not _SAFE.fullmatch(name) or name in (".", ".."):
        raise DistError(f"{what} {name!r} is not a safe name (letters, digits, '_', '.', '-')")


def _prefix() -> str:
    return f"purlin-{os.getuid()}-"


def _bases() -> list[Path]:
    """Where run dirs may live, preferred first."""
    out = []
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        out.append(shm)
    out.append(Path(tempfile.gettempdir()))
    return out


def _is_ours(path: Path) -> bool:
    """A real directory (not a link someone planted) owned by this user."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def run_dir(run: str) -> Path:
    """This run's private directory, created (with an ``owner`` file naming
    this pid) if no rank has created it yet."""
    _check_name("run id", run)
    path = _bases()[0] / f"{_prefix()}{run}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        # Another rank made it first, or someone else planted the name: only
        # a directory of ours that nobody else can enter is good enough.
        if not _is_ours(path) or stat.S_IMODE(os.lstat(path).st_mode) != 0o700:
            raise DistError(f"{path} exists but is not a private directory of this user") from None
        return path
    except OSError as exc:
        raise DistError(f"cannot create the run's shared-memory folder {path}: {exc.strerror or exc}") from None
    os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask; be exact
    # Written under a temp name and renamed, so a sweeper never reads half a pid.
    tmp = path / f".{OWNER}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(tmp, path / OWNER)
    return path


def run_dirs(run: str) -> list[Path]:
    """The existing directories of ``run`` (created by any rank), none
    created: ``purlin-{uid}-{run}`` and ``purlin-{uid}-{run}-{suffix}``, the
    name a run's rank 0 gives it (a random suffix, backends/procs.py)."""
    _check_name("run id", run)
    exact = f"{_prefix()}{run}"
    found = []
    for base in _bases():
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        found += [p for p in entries if (p.name == exact or p.name.startswith(f"{exact}-")) and _is_ours(p)]
    return sorted(found)


def remove_run_dir(path: Path) -> None:
    """Remove a run dir and its segments, best effort (mappings stay valid)."""
    path = Path(path)
    if path.name.startswith(_prefix()) and _is_ours(path):
        shutil.rmtree(path, ignore_errors=True)


def sweep_stale() -> int:
    """Remove this user's run dirs whose creating process no longer exists;
    how many. Others' directories and ones without a readable owner are kept:
    a dir whose owner file is not written yet belongs to a run just starting."""
    removed = 0
    for base in _bases():
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        for path in entries:
            if not path.name.startswith(_prefix()) or not _is_ours(path):
                continue
            try:
                pid = int((path / OWNER).read_text().strip())
            except (OSError, ValueError):
                continue
            if pid <= 0:
                continue
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
            except OSError:
                pass  # it exists (another user's pid now, maybe): keep the dir
    return removed


class Segment:
    """A shared byte buffer backed by a file in a run dir. ``buffer`` is a
    writable memoryview of the mapping, usable with numpy.frombuffer."""

    def __init__(self, path: Path, mapping: mmap.mmap):
        self.path = path
        self.nbytes = len(mapping)
        self._mmap = mapping
        self.buffer = memoryview(mapping)

    @classmethod
    def create(cls, directory: Path, name: str, nbytes: int) -> Segment:
        path = cls._path(directory, name, nbytes)
        try:
            # O_EXCL|O_NOFOLLOW: never adopt a file (or a link) that is already there.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise DistError(f"cannot create the segment {path}: {exc.strerror or exc}") from None
        try:
            os.fchmod(fd, 0o600)
            os.ftruncate(fd, nbytes)
            if nbytes and hasattr(os, "posix_fallocate"):
                # ftruncate alone is sparse: a full /dev/shm would then kill
                # the first rank that touches a page (SIGBUS), not say so here.
                os.posix_fallocate(fd, 0, nbytes)
            return cls(path, mmap.mmap(fd, nbytes))
        except OSError as exc:
            os.unlink(path)
            raise DistError(f"cannot size the segment {path} to {nbytes} B: {exc.strerror or exc}") from None
        finally:
            os.close(fd)  # the mapping keeps the pages; the descriptor is not needed

    @classmethod
    def open(cls, directory: Path, name: str, nbytes: int) -> Segment:
        path = cls._path(directory, name, nbytes)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise DistError(f"cannot open the segment {path}: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
                raise DistError(f"the segment {path} is not a file of this user")
            if st.st_size < nbytes:
                raise DistError(f"the segment {path} holds {st.st_size} B, fewer than the {nbytes} B asked for")
            return cls(path, mmap.mmap(fd, nbytes))
        finally:
            os.close(fd)

    @staticmethod
    def _path(directory: Path, name: str, nbytes: int) -> Path:
        _check_name("segment name", name)
        if name == OWNER or name.startswith("."):
            raise DistError(f"segment name {name!r} is reserved")
        if not isinstance(nbytes, int) or nbytes < 1:
            raise DistError(f"a segment needs at least 1 byte, not {nbytes!r}")
        return Path(directory) / name

    def unlink(self) -> None:
        """Remove the file; this mapping (and other processes') stays valid."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Unmap. If arrays still view the buffer the mapping cannot be
        closed yet; it is then released when the last of them goes."""
        try:
            self.buffer.release()
            self._mmap.close()
        except BufferError:
            pass

    def __enter__(self) -> Segment:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Segment", "remove_run_dir", "run_dir", "run_dirs", "sweep_stale"]
