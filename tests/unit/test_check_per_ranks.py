"""Specs are validated at load for R = 1..8; one broken only at another R is
refused for that R when instantiated, and ``purlin check`` reports that R as
an error row and runs the rest (issue 15)."""

from __future__ import annotations

import json
import textwrap

import pytest

from purlin_bench.tools import check as m
from purlin_bench.cli.main import run
from purlin_bench.base.errors import SpecError
from purlin_bench.spec import instantiate, load_spec_file

# The output index divides by R - 9: fine for R = 1..8 (so it loads), broken at 9.
BROKEN_AT_9 = """
name: broken-at-9
op: copy
input:
  - chunk: c(r)
output:
  - chunk: c(r + 0 * (r // (R - 9)))
"""
# The same, in 'requires'.
REQUIRES_AT_9 = """
name: requires-at-9
op: copy
requires: 1 // (R - 9) < 10
input:
  - chunk: c(r)
output:
  - chunk: c(r)
"""
# Broken at 9 ranks for root 4 only: the other roots still run.
ROOT_AT_9 = """
name: root-at-9
op: copy
input:
  - chunk: c
    when: r == root
output:
  - chunk: c
    when: r != root + 0 * (1 // ((R - 9) * 10 + root - 4))
"""


def _spec(tmp_path, text: str):
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return load_spec_file(path), str(path)


@pytest.mark.parametrize("text", [BROKEN_AT_9, REQUIRES_AT_9])
def test_loads_and_is_refused_only_at_9_ranks(tmp_path, text):
    spec, _ = _spec(tmp_path, text)
    for ranks in (1, 8, 10):
        instantiate(spec, ranks, 3, 4)
    with pytest.raises(SpecError, match=r"spec.yaml: .*division by zero.*9"):
        instantiate(spec, 9, 3, 4)


def _request(spec, ranks, roots=None):
    return m.Request((spec,), ranks, ("direct",), ("float32",), (1, 7), roots, None, (False, True))


@pytest.mark.parametrize("text", [BROKEN_AT_9, REQUIRES_AT_9])
def test_expand_reports_that_rank_count_and_keeps_the_others(tmp_path, text):
    spec, _ = _spec(tmp_path, text)
    items = list(m.expand(_request(spec, (2, 9, 3))))
    errors = [i for i in items if isinstance(i, m.Outcome) and i.status == m.ERROR]
    assert [e.combo.ranks for e in errors] == [9]
    assert "spec refused at 9 ranks" in errors[0].note and "division by zero" in errors[0].note
    jobs = [i for i in items if isinstance(i, m.Job)]
    assert sorted({j.combo.ranks for j in jobs}) == [2, 3] and len(jobs) == 2 * 2 * 2


def test_expand_refuses_only_the_broken_root(tmp_path):
    spec, _ = _spec(tmp_path, ROOT_AT_9)
    assert spec.rooted
    items = list(m.expand(_request(spec, (9,))))
    errors = [i for i in items if isinstance(i, m.Outcome) and i.status == m.ERROR]
    assert [(e.combo.ranks, e.combo.root) for e in errors] == [(9, 4)]
    assert {j.combo.root for j in items if isinstance(j, m.Job)} == set(range(9)) - {4}


def test_check_runs_the_other_rows_and_fails(tmp_path, capsys):
    _, path = _spec(tmp_path, BROKEN_AT_9)
    code = run(["check", path, "--ranks", "1,2,9,3", "--count", "0,1", "--json"])
    out, err = capsys.readouterr()
    assert code == 1, err
    data = json.loads(out)
    by_status = {}
    for row in data["results"]:
        by_status.setdefault(row["status"], set()).add(row["ranks"])
    assert by_status == {"pass": {1, 2, 3}, "error": {9}}
    assert data["summary"]["errors"] == 1


def test_check_of_only_the_broken_rank_count_reports_it(tmp_path, capsys):
    # Not 'nothing to check: every combination is n/a': the row says why.
    _, path = _spec(tmp_path, BROKEN_AT_9)
    code = run(["check", path, "--ranks", "9", "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and not err
    (row,) = json.loads(out)["results"]
    assert row["status"] == "error" and "division by zero" in row["note"]
