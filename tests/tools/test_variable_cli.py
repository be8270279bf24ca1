"""The commands on collectives whose sizes come per call (issue 31): list
shows them, show prints a program with symbolic sizes, check draws counts
(--counts), and what is not supported yet is one line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from purlin_bench.strategies import STRATEGIES
from tests.tools.test_cli import assert_one_line_error, purlin

VARIABLE = ("all-gather-v", "reduce-scatter-v", "all-to-all-v")


def test_list_shows_the_three(capsys):
    code, out, _ = purlin(capsys, "list", "--json")
    entries = {e["name"]: e for e in json.loads(out)}
    assert code == 0 and all(entries[n]["count"] == "variable" for n in VARIABLE)
    assert entries["all-to-all-v"]["bench"]["size"] == "total / R"
    assert entries["reduce-scatter-v"]["op"] == "reduce" and entries["all-gather-v"]["strategies"]


def test_show_prints_symbolic_sizes(capsys):
    code, out, _ = purlin(capsys, "show", "all-to-all-v", "--ranks", "3", "--count", "100", "--strategy", "push")
    assert code == 0
    assert out.startswith("all-to-all-v / push, 3 ranks, counts per call, each at most 100 float32")
    assert "n5 = c(1, 2)" in out and "in[n3+n4:+n5[0:100])" in out and "r2.out[n2:+n5[0:100])" in out
    code, out, _ = purlin(capsys, "show", "reduce-scatter-v", "--ranks", "4", "--json")
    data = json.loads(out)
    assert code == 0 and data["schema"] == 2 and len(data["count_caps"]) == 4


@pytest.mark.parametrize("counts", ["uniform", "skewed", "hot", "sparse", "all"])
def test_check_draws_each_distribution(capsys, counts):
    code, out, _ = purlin(
        capsys,
        "check",
        ",".join(VARIABLE),
        "--ranks",
        "1,4",
        "--count",
        "0,33",
        "--dtype",
        "float32,float8_e4m3fn",
        "--counts",
        counts,
        "--no-inplace",
        "--json",
    )
    data = json.loads(out)
    assert code == 0 and data["summary"]["failed"] == 0 and data["summary"]["passed"] == 3 * 2 * 2 * 2 * len(STRATEGIES)
    assert {r["counts"] for r in data["results"]} == {counts}


def test_check_table_has_a_counts_column_only_with_variable_sizes(capsys):
    code, out, _ = purlin(capsys, "check", "all-gather-v", "--ranks", "2", "--strategy", "ring", "--no-inplace")
    assert code == 0 and "counts" in out.splitlines()[2] and "all passed: 1 passed" in out
    code, out, _ = purlin(capsys, "check", "all-gather", "--ranks", "2", "--strategy", "ring", "--no-inplace")
    assert code == 0 and "counts" not in out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ("check", "all-gather-v", "--counts", "zipf"),
            "unknown --counts 'zipf' (known: all, uniform, skewed, hot, sparse)",
        ),
        (("check", "all-reduce", "--counts", "hot"), "--counts is for collectives whose sizes come per call"),
        # bench and tune too: a --counts no collective asked for takes was ignored without a word
        (("bench", "all-reduce", "--backend", "numpy", "--counts", "skewed"), "--counts is for collectives whose"),
        (("tune", "all-gather", "--backend", "numpy", "--counts", "uniform"), "--counts is for collectives whose"),
        (("show", "all-to-all-v", "--inplace"), "all-to-all-v has no in-place form"),
        (
            ("bench", "all-to-all-v", "--backend", "numpy", "--counts", "zipf"),
            "unknown --counts 'zipf' (known: uniform, skewed, hot, sparse)",
        ),
        (
            ("tune", "reduce-scatter-v", "--backend", "numpy", "--counts", "zipf"),
            "unknown --counts 'zipf' (known: uniform, skewed, hot, sparse)",
        ),
        (("check", "all-gather-v,nope"), "unknown collective 'nope'"),
        (("show", "all-reduce", "--dtype", "e5m2", "--source"), "--source: backend cupy does not move float8_e5m2 yet"),
    ],
)
def test_what_is_not_supported_is_one_line(capsys, args, fragment):
    assert_one_line_error(*purlin(capsys, *args), fragment)


def test_a_backend_without_sizes_per_call_is_refused_before_the_first_row(capsys, tmp_path):
    # all-gather first: refused at all-to-all-v's turn, the run had already replaced --json with its rows.
    kept = tmp_path / "kept.json"
    kept.write_text("KEEP")
    args = ("bench", "all-gather,all-to-all-v", "-e", "64", "--backend", "fake", "--json", kept)
    assert_one_line_error(*purlin(capsys, *args), "backend fake runs no variable-size program yet (all-to-all-v's")
    assert kept.read_text() == "KEEP"


def test_show_source_of_a_variable_collective_reads_its_counts(capsys):
    code, out, _ = purlin(capsys, "show", "all-to-all-v", "--ranks", "3", "--count", "64", "--source")
    assert code == 0 and "const i64* __restrict__ counts) {" in out
    # every rank's group loads the 9 counts' clamped values it uses, none past its capacity of 64
    assert "const i64 c8 = clamp_count(__ldg(counts + 8), 64ll);" in out and "var_move(" in out


def test_a_users_own_variable_collective_from_examples(capsys):
    path = str(Path(__file__).resolve().parents[2] / "examples" / "ring-shift-v.yaml")
    code, out, _ = purlin(
        capsys,
        "check",
        path,
        "--ranks",
        "1,2,3,8",
        "--dtype",
        "float32,float8_e5m2",
        "--count",
        "0,1001",
        "--no-inplace",
        "--json",
    )
    data = json.loads(out)
    assert code == 0 and data["summary"]["failed"] == 0 and data["summary"]["passed"] == 4 * 2 * 2 * len(STRATEGIES)
    code, out, _ = purlin(capsys, "show", path, "--ranks", "3", "--count", "64", "--strategy", "ring")
    assert code == 0 and "n0 = c(0), n1 = c(1), n2 = c(2)" in out


@pytest.mark.parametrize("distribution", ("uniform", "skewed", "hot", "sparse"))
def test_bench_times_rows_whose_counts_add_up_to_their_size(capsys, tmp_path, distribution):
    """A row of size S runs counts adding up to S's total (all-to-all-v's S is
    total / R), drawn from --counts, every call checked: the JSON says how."""
    out_file = tmp_path / "v.json"
    code, out, _ = purlin(
        capsys,
        "bench",
        "all-to-all-v",
        "--backend",
        "numpy",
        "--ranks",
        "4",
        "-b",
        "64",
        "-e",
        "4K",
        "-f",
        "8",
        "--counts",
        distribution,
        "--json",
        str(out_file),
        "-n",
        "2",
        "-w",
        "0",
        "-G",
        "1",
    )
    assert code == 0 and f"# counts: {distribution}" in out
    data = json.loads(out_file.read_text())
    assert data["environment"]["counts"] == distribution
    rows = data["results"]
    assert [r["size"] for r in rows] == [64, 512, 4096]
    for row in rows:
        assert row["distribution"] == distribution and len(row["counts"]) == 16
        assert sum(row["counts"]) * 4 // 4 == row["size"]  # S = total / R elements of 4 bytes, at 4 ranks
        assert row["count"] == max(row["counts"]) and row["out_of_place"]["nwrong"] == 0
        if distribution == "hot":
            assert sum(c > 0 for c in row["counts"]) <= 4  # one destination rank takes everything


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("input: []\noutput: []\n", "needs at least one chunk"),
        ("input: [c(r - 100)]\noutput: [c((r-1)%R - 100)]\n", "chunk indices must be >= 0"),
        ("bench: {size: -total, busbw: 1}\ninput: [c(r)]\noutput: [c((r-1)%R)]\n", "bench.size: '-total' must be"),
        ("bench: {size: total, busbw: 1e308*10 - 1e308*10}\ninput: [c(r)]\noutput: [c((r-1)%R)]\n", "got nan"),
    ],
)
def test_a_variable_spec_bench_or_tune_would_crash_on_is_one_line_before_any_work(capsys, tmp_path, body, fragment):
    # Audit 26 (F3, F8, F9): these loaded, then bench and tune crashed, or tune
    # ran whole studies before refusing the plan, or bench wrote NaN rows.
    spec = tmp_path / "my-v.yaml"
    spec.write_text("name: my-v\nop: copy\ncount: variable\n" + body)
    results = tmp_path / "bench.json"
    for args in (["bench", "--spec", str(spec), "-e", "1K", "--json", str(results)],
                 ["tune", "--spec", str(spec), "--out", str(tmp_path / "tuned"), "--sweep", "quick", "--trials", "2"],
                 ["check", str(spec), "--ranks", "2", "--count", "5"]):
        assert_one_line_error(*purlin(capsys, *args), fragment)
    assert not results.exists() and not (tmp_path / "tuned").exists()
