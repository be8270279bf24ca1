"""docs/performance.md's tables are lab/perf_table.py's rendering of the
committed results files: the page and the files cannot drift apart."""

from __future__ import annotations

import sys
from pathlib import Path

LAB = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(LAB))

import perf_table  # noqa: E402


def test_the_current_files_exist_and_cover_both_dtypes():
    files = perf_table.current_files()
    assert len(files) >= 16
    text = perf_table.render(files)
    assert "**float32**" in text and "**bfloat16**" in text
    assert text.count("| all-reduce |") == 2


def test_the_performance_page_holds_the_rendered_tables():
    assert perf_table.main(["--check", str(LAB.parent / "docs" / "performance.md")]) == 0


def test_two_runs_of_one_row_are_refused(tmp_path):
    import pytest

    one = perf_table.current_files()[0]
    with pytest.raises(SystemExit, match="both have"):
        perf_table.render([one, one])
