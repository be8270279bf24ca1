"""Where studies live: an Optuna RDB storage from a URL, with clear errors.

``sqlite:///<out>/tune.db`` by default, so that an interrupted tune resumes
where it stopped; any SQLAlchemy URL (``postgresql://user@host/db``) lets
several machines tune one study. A URL that cannot be opened (no server, no
driver, no such file) is one :class:`StorageError` line, never a traceback.

Heartbeats are on: a worker that dies mid-trial (SIGKILL, a lost machine)
leaves a RUNNING trial that the next worker to look (Optuna checks before
every trial; tune.tuner also at a study's start and while a trial waits for
the last slots) fails once its heartbeat is older than the grace period, and
queues again with its parameters (tune.tuner.retry_stale). So it is neither
counted nor waited on for long.
"""

from __future__ import annotations

import random
import time
import warnings
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from purlin_bench.base.errors import PurlinError

DB_NAME = "tune.db"
# A live worker beats every HEARTBEAT_S from a thread; one silent for GRACE_S
# is taken for dead: its trial is failed and run again, and if the worker was
# alive after all, its optimize raises when it reports the result (a FAIL
# trial cannot be told). The beat needs the interpreter, so a trial that holds
# it for longer than the grace (a kernel compiled in-process: CuPy compiled
# its reductions in 3-4 s each on a fresh machine) would be mistaken for dead.
# ServiceBench.warm_up and prime compile before any study so that trials do
# not; the grace is a wide margin over those seconds all the same.
#
# A server (PostgreSQL) is shared by hosts whose clocks and networks we do
# not know: a minute. A SQLite file is shared only by workers of this host,
# and a rerun after a kill waits out the killed trial's grace before its last
# trial (tests/tools/test_tune_resume.py): seconds.
HEARTBEAT_S, GRACE_S = 10, 60
SQLITE_HEARTBEAT_S, SQLITE_GRACE_S = 1, 10
CONNECT_TIMEOUT_S = 10
_CREATE_ATTEMPTS = 4


class StorageError(PurlinError):
    """The study storage cannot be opened or was lost."""


def default_storage_url(out_dir: str | Path) -> str:
    return f"sqlite:///{(Path(out_dir) / DB_NAME).resolve()}"


def check_url(url: str) -> None:
    """A --storage URL a user typed, checked before any tune starts: not
    empty (that is no storage, not the default), and a SQLite file's folder
    must exist. open_storage creates the default's folder (the plan folder);
    a folder named in a URL is the user's, and a typo there would otherwise
    leave a new tree holding studies nobody finds. Then check_sqlite."""
    if not url.strip():
        raise StorageError("--storage is empty (leave it out for the default, sqlite:///OUT/tune.db)")
    label = f"--storage {display_url(url)}"
    path = _sqlite_file(url, label)
    if path is not None:
        if not path.parent.is_dir():
            raise StorageError(f"{label}: folder {path.parent} does not exist")
        if path.is_dir():
            raise StorageError(f"{label}: {path} is a folder, not a database file")
    check_sqlite(path, label)


def check_sqlite(path: Path | None, label: str) -> None:
    """Refuse a SQLite database that would lose or spoil studies: one kept
    in memory (nothing to resume or share, and Optuna's heartbeat thread,
    on a connection of its own, would see an empty database), and an
    existing file of another program, which Optuna would add its tables to.
    The file is only read (read-only connection): a new or empty file and
    an Optuna study database pass. ``path``: _sqlite_file's (None: no file)."""
    if path is None or not path.exists():
        return
    if not path.is_file():  # a FIFO or device: opening it could block or read nothing that lasts
        raise StorageError(f"{label}: {path} is not a regular file")
    found = _tables(path, label)
    if not found:
        return
    others = sorted(found - _optuna_tables())
    if others and "version_info" not in found:
        shown = ", ".join(repr(name[:40]) for name in others[:3])  # repr: a name holding a newline stays one line
        shown += f" and {len(others) - 3} more" if others[3:] else ""
        raise StorageError(f"{label}: {path} is a database of another program (tables {shown}), not an Optuna "
                           "study database; refusing to add study tables to it: name a new file")


def _sqlite_file(url: str, label: str) -> Path | None:
    """The file a SQLite URL opens, as SQLAlchemy's pysqlite dialect reads
    the URL (a ``file:`` URI with ``uri=true`` too); None for other
    databases and for URLs SQLAlchemy cannot parse (open_storage says why).
    A database in memory (or SQLite's temporary one, an empty name) is a
    StorageError."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.util import asbool

    try:
        parsed = make_url(url)
    except Exception:  # not a URL: open_storage's error says so
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    name = parsed.database or ""
    memory = name in ("", ":memory:") or parsed.query.get("mode") == "memory"  # as pysqlite's _is_url_file_db
    try:
        uri = asbool(parsed.query.get("uri", False))
    except ValueError:
        uri = False
    if uri and name.startswith("file:"):
        name = unquote(name[len("file:"):])
        if name.startswith("//"):  # file://[host]/path
            name = "/" + name[2:].partition("/")[2]
        memory = memory or name in ("", ":memory:")
    if memory:
        raise StorageError(f"{label}: a SQLite database in memory keeps no studies once tune exits, so they "
                           "could not be resumed or shared: name a file (sqlite:////path/to/tune.db)")
    return Path(name)


def _tables(path: Path, label: str) -> set[str]:
    """The tables of a SQLite file, read on a read-only connection."""
    import sqlite3

    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60)) as db:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    except sqlite3.Error as exc:
        raise StorageError(f"{label}: cannot read {path} as a SQLite database: {exc}") from None
    return {name for (name,) in rows if not name.startswith("sqlite_")}


def _optuna_tables() -> set[str]:
    """The tables Optuna's RDB storage makes, from its own models."""
    from optuna.storages._rdb import models

    return set(models.BaseModel.metadata.tables) | {"alembic_version"}


def display_url(url: str) -> str:
    """The URL with any password hidden, for messages; one without a
    password as typed (rendering quotes a SQLite name's colons: %3Amemory%3A)."""
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        return url if parsed.password is None else parsed.render_as_string(hide_password=True)
    except Exception:  # not a URL at all: show it as typed, minus a user:password@ part
        head, sep, tail = url.partition("@")
        return f"{head.split('//')[0]}//***@{tail}" if sep else url


def _with_driver(url: str) -> str:
    """SQLAlchemy 2.1 reads a bare ``postgresql://`` as psycopg 3; use
    psycopg2 when that is the driver installed (our ``postgres`` extra)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        try:
            import psycopg  # noqa: F401  (psycopg 3 present: the default works)

            return f"postgresql://{rest}"
        except ImportError:
            return f"postgresql+psycopg2://{rest}"
    return url


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    if url.startswith("sqlite"):
        # Several local workers may share one file: wait for its lock instead of failing.
        return {"connect_args": {"timeout": 60}}
    return {}


def _reason(exc: BaseException) -> str:
    """The first informative line of a database error."""
    if isinstance(exc, ImportError):
        return "no database driver for it is installed (for PostgreSQL, in a checkout: pip install -e '.[postgres]')"
    # Optuna wraps the database's own error (a read-only file, a full disk)
    # in a StorageInternalError that guesses "e.g. exceeding max length":
    # the cause is what the user can act on.
    while type(exc).__name__ == "StorageInternalError" and (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__
    text = str(getattr(exc, "orig", None) or exc)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("(Background")]
    first = lines[0] if lines else type(exc).__name__
    return first.removeprefix("(psycopg2.OperationalError) ").removeprefix("(sqlite3.OperationalError) ")


def open_storage(url: str, heartbeat_s: int | None = None, grace_s: int | None = None) -> Any:
    """An Optuna RDBStorage for ``url``; raises StorageError if unreachable.
    ``heartbeat_s`` and ``grace_s`` override the defaults above (tests)."""
    import optuna  # the tune path only: keeps `purlin --help` fast
    import sqlalchemy.exc

    label = f"study storage {display_url(url)}"
    path = _sqlite_file(url, label)
    check_sqlite(path, label)  # the default OUT/tune.db too, and callers that skip check_url
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot open study storage {display_url(url)}: {exc.strerror or exc}") from None
    real = _with_driver(url)
    local = real.startswith("sqlite")
    heartbeat_s = heartbeat_s or (SQLITE_HEARTBEAT_S if local else HEARTBEAT_S)
    grace_s = grace_s or (SQLITE_GRACE_S if local else GRACE_S)
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    real,
                    engine_kwargs=_engine_kwargs(real),
                    heartbeat_interval=heartbeat_s,
                    grace_period=grace_s,
                    heartbeat_stale_trial_callback=_retry_stale,
                )
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as exc:
            # Workers starting together on a fresh database race to create
            # Optuna's tables; the loser finds them made a moment later.
            if attempt + 1 == _CREATE_ATTEMPTS:
                raise StorageError(f"cannot open study storage {display_url(url)}: {_reason(exc)}") from None
            time.sleep(0.5 + random.random())
        except (ImportError, ValueError) as exc:
            raise StorageError(f"cannot open study storage {display_url(url)}: {_reason(exc)}") from None
        except RuntimeError as exc:
            # Optuna's schema check: tables set up by another Optuna version.
            # Its advice (pip install -U optuna) may be wrong both ways, so
            # only its first sentence is kept, with what purlin can say.
            first = str(exc).split(". ")[0]
            raise StorageError(f"cannot open study storage {display_url(url)}: {first} (written by another "
                               "Optuna version: use that version, or another --storage / --out)") from None
        except Exception as exc:  # SQLAlchemy and driver errors have no common base we can import lazily
            if _is_database_error(exc):
                raise StorageError(f"cannot open study storage {display_url(url)}: {_reason(exc)}") from None
            raise
    raise AssertionError("unreachable")


def _retry_stale(study: Any, trial: Any) -> None:
    from purlin_bench.tools.tune.tuner import retry_stale

    retry_stale(study, trial)


def _is_database_error(exc: BaseException) -> bool:
    import optuna
    import sqlalchemy.exc

    return isinstance(exc, (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError))


def storage_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the storage went away during a tune."""
    import optuna
    import sqlalchemy.exc

    return (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError)


def lost_storage(url: str, exc: BaseException) -> StorageError:
    return StorageError(f"lost the study storage {display_url(url)}: {_reason(exc)}")
