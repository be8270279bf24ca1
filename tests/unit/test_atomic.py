"""The one atomic writer: whole files or none, readable by others, and a
one-line error naming the path and the system's reason."""

from __future__ import annotations

import os
import stat

import pytest

from purlin_bench.base import textfile as atomic  # the writer write_text_atomic delegates to
from purlin_bench.base.atomic import WriteError, write_text_atomic
from purlin_bench.base.errors import PurlinError


def test_writes_and_replaces(tmp_path):
    path = tmp_path / "a" / "b" / "out.txt"  # missing folders are made
    write_text_atomic(path, "first\n")
    write_text_atomic(path, "second: ü\n")
    assert path.read_text(encoding="utf-8") == "second: ü\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(path.parent) == ["out.txt"]


def test_a_file_where_the_folder_should_be(tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("not a folder")
    with pytest.raises(WriteError) as err:
        write_text_atomic(blocker / "plan.json", "x")
    message = str(err.value)
    assert message.startswith(f"{blocker / 'plan.json'}: cannot write: ") and "\n" not in message
    assert isinstance(err.value, PurlinError)
    assert os.listdir(tmp_path) == ["results"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_unwritable_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(WriteError, match=r"ro/out\.txt: cannot write: Permission denied$"):
            write_text_atomic(folder / "out.txt", "x")
        assert os.listdir(folder) == []
    finally:
        folder.chmod(0o755)


def test_unwritable_folder_as_root_too(tmp_path, monkeypatch):
    """What a read-only folder does to mkstemp, on any user."""

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(atomic.tempfile, "mkstemp", denied)
    with pytest.raises(WriteError, match=r"out\.txt: cannot write: Permission denied$"):
        write_text_atomic(tmp_path / "out.txt", "x")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("step", ["fsync", "chmod", "replace"])
def test_a_failed_step_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch, step):
    path = tmp_path / "out.txt"
    write_text_atomic(path, "old\n")

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, step, fail)
    with pytest.raises(WriteError, match=r"out\.txt: cannot write: No space left on device$"):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_an_interrupt_leaves_no_temp_and_is_not_swallowed(tmp_path, monkeypatch):
    def interrupt(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(tmp_path / "out.txt", "x")
    assert os.listdir(tmp_path) == []
