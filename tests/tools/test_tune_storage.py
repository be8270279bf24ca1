"""--storage URLs that would lose or spoil studies (audit 26, F6 and F11):
a SQLite database kept in memory, and another program's SQLite file. Each is
refused in one line before any study, and the file is left as it was; a new
file, an empty one and an existing Optuna database stay accepted (resume)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from purlin_bench.tools.tune.storage import StorageError, check_url, open_storage
from tests.cli_refusal import purlin, refused

TUNE = (
    "tune", "all-reduce", "--backend", "numpy", "--trials", "1", "--confirm", "0",
    "--dtype", "float32", "--ranks", "2", "--max-bytes", "1K",
)  # fmt: skip


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return sorted(row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'"))


@pytest.fixture
def other_app(tmp_path) -> Path:
    """A SQLite database of some other program."""
    path = tmp_path / "another-app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers (name) VALUES ('Ada')")
    return path


# -- in memory: nothing would be kept to resume, and Optuna's heartbeat thread sees an empty database --


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///:memory:",
        "sqlite://",
        "sqlite:///",
        "sqlite:///file:x?mode=memory&uri=true",
        "sqlite:///file::memory:?uri=true",
        "sqlite+pysqlite:///:memory:",
    ],
)
def test_an_in_memory_sqlite_storage_is_refused_before_any_study(capsys, tmp_path, url):
    out = tmp_path / "out"
    args = ("tune", "all-to-all-v", "--counts", "skewed", "--sweep", "quick", "--trials", "2")
    line = refused(capsys, "in memory", *args, "--out", out, "--storage", url, seconds=30)
    assert "resume" in line and "file" in line, line
    assert list(tmp_path.iterdir()) == []  # no out folder, no plan


def test_open_storage_refuses_memory_too():
    """The library path (run_tune without the CLI) would lose its trials the same way."""
    with pytest.raises(StorageError, match="in memory"):
        open_storage("sqlite:///:memory:")


# -- another program's database: Optuna's tables would be added to it without a word ------------------


def test_another_programs_sqlite_database_is_refused_and_left_alone(capsys, tmp_path, other_app):
    before = other_app.read_bytes()
    line = refused(capsys, "another program", *TUNE, "--out", tmp_path / "out", "--storage", f"sqlite:///{other_app}")
    assert str(other_app) in line and "customers" in line, line
    assert other_app.read_bytes() == before
    assert tables(other_app) == ["customers"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["another-app.db"]  # no journal, no out folder


def test_another_programs_database_as_the_default_tune_db_is_refused(capsys, tmp_path, other_app):
    """OUT/tune.db that is not a study database: open_storage checks it too."""
    other_app.rename(tmp_path / "tune.db")
    before = (tmp_path / "tune.db").read_bytes()
    refused(capsys, "another program", *TUNE, "--out", tmp_path)
    assert (tmp_path / "tune.db").read_bytes() == before


def test_a_file_that_is_not_a_database_is_one_line(capsys, tmp_path):
    notes = tmp_path / "notes.db"
    notes.write_text("my notes, not a database\n" * 100)
    refused(capsys, "not a database", *TUNE, "--out", tmp_path / "out", "--storage", f"sqlite:///{notes}")
    assert notes.read_text() == "my notes, not a database\n" * 100


def test_table_names_in_the_refusal_are_bounded_and_on_one_line(tmp_path):
    path = tmp_path / "odd.db"
    with sqlite3.connect(path) as db:
        for i in range(50):
            db.execute(f'CREATE TABLE "t{i}\nline {"x" * 200}" (a)')
    with pytest.raises(StorageError) as caught:
        check_url(f"sqlite:///{path}")
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400 + len(str(path)), message


def test_optuna_tables_named_like_another_apps_do_not_pass_for_a_study_database(tmp_path):
    """A 'trials' table of some other program next to its own tables, with no
    Optuna version_info: still another program's database."""
    path = tmp_path / "clinic.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE trials (id INTEGER PRIMARY KEY)")
        db.execute("CREATE TABLE patients (id INTEGER PRIMARY KEY)")
    with pytest.raises(StorageError, match="another program"):
        check_url(f"sqlite:///{path}")


# -- what stays accepted ---------------------------------------------------------------------------------


def test_a_new_file_and_an_empty_file_are_accepted_and_not_created(tmp_path):
    check_url(f"sqlite:///{tmp_path / 'new.db'}")
    assert not (tmp_path / "new.db").exists()
    (tmp_path / "empty.db").touch()
    check_url(f"sqlite:///{tmp_path / 'empty.db'}")
    assert (tmp_path / "empty.db").stat().st_size == 0


def test_an_existing_optuna_database_is_accepted_and_resumed(capsys, tmp_path):
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    code, _, err = purlin(capsys, *TUNE, "--out", tmp_path / "out", "--storage", url)
    assert code == 0, err
    assert "version_info" in tables(tmp_path / "studies.db")
    check_url(url)
    code, _, err = purlin(capsys, *TUNE, "--out", tmp_path / "out", "--storage", url)
    assert code == 0, err


def test_optuna_tables_already_added_to_another_apps_file_stay_accepted(tmp_path, other_app):
    """What the old check let happen: those studies can still be resumed."""
    import optuna

    optuna.storages.RDBStorage(f"sqlite:///{other_app}").engine.dispose()
    check_url(f"sqlite:///{other_app}")
    check_url(f"sqlite:///file:{other_app}?mode=ro&uri=true")


def test_messages_show_the_url_as_typed_but_never_a_password():
    from purlin_bench.tools.tune.storage import display_url

    assert display_url("sqlite:///:memory:") == "sqlite:///:memory:"
    assert display_url("sqlite:///file:x?mode=memory&uri=true") == "sqlite:///file:x?mode=memory&uri=true"
    shown = display_url("postgresql://ada:s3cret@db.example/studies")
    assert "s3cret" not in shown and "ada" in shown and "db.example/studies" in shown
