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
from pathlib import Path
from typing import Any

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
    leave a new tree holding studies nobody finds."""
    if not url.strip():
        raise StorageError("--storage is empty (leave it out for the default, sqlite:///OUT/tune.db)")
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):].split("?", 1)[0]
        if path and path != ":memory:":
            folder = Path(path).parent
            if not folder.is_dir():
                raise StorageError(f"--storage {display_url(url)}: folder {folder} does not exist")
            if Path(path).is_dir():
                raise StorageError(f"--storage {display_url(url)}: {path} is a folder, not a database file")


def display_url(url: str) -> str:
    """The URL with any password hidden, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
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

    if url.startswith("sqlite:///"):
        try:
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
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
