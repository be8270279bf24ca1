"""purlin bench's stdout as nccl-tests log readers and terminal users see it."""

from __future__ import annotations

import csv
import io
import json

import pytest
from rich.console import Console

from purlin_bench.backends.numpy import NumpyBackend
from purlin_bench.backends.port import TimingPolicy
from purlin_bench.tools.bench.measure import Measurer
from purlin_bench.cli import common
from purlin_bench.cli.main import run

FAST = ("--backend", "numpy", "-n", "1", "-w", "0", "-G", "1")
HEADER_WORDS = [
    "size",
    "count",
    "type",
    "redop",
    "root",
    "time",
    "algbw",
    "busbw",
    "#wrong",
    "time",
    "algbw",
    "busbw",
    "#wrong",
]


def bench(capsys, *args):
    code = run(["bench", *map(str, args), *FAST])
    out, err = capsys.readouterr()
    return code, out, err


def parse_like_a_log_reader(text: str):
    """What nccl-tests log parsers do: find the header line, take data rows
    (lines not starting with '#'), index fields from the end."""
    lines = text.splitlines()
    header = [line for line in lines if line.startswith("#") and line.lstrip("# ").split()[:1] == ["size"]]
    rows = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    avg = [line for line in lines if line.startswith("# Avg bus bandwidth")]
    bounds = [line for line in lines if line.startswith("# Out of bounds values")]
    return header, rows, avg, bounds


def test_captured_stdout_is_an_nccl_tests_log(capsys):
    code, out, _ = bench(capsys, "all-reduce", "-b", 64, "-e", 4096, "-f", 4, "--ranks", 4)
    assert code == 0
    header, rows, avg, bounds = parse_like_a_log_reader(out)
    assert len(header) == 1 and header[0].lstrip("# ").split() == HEADER_WORDS
    assert [int(r[0]) for r in rows] == [64, 256, 1024, 4096]
    for r in rows:
        assert len(r) == 13 and r[2] == "float" and r[3] == "sum" and r[4] == "-1"
        oop_time, oop_busbw, ip_time, ip_busbw = float(r[-8]), float(r[-6]), float(r[-4]), float(r[-2])
        assert oop_time > 0 and ip_time > 0 and oop_busbw >= 0 and ip_busbw >= 0
        assert r[-5] == r[-1] == "0"
    assert bounds == ["# Out of bounds values : 0 OK"]
    assert len(avg) == 1
    number = avg[0].split(":", 1)[1]
    assert number.strip() == number.lstrip() and float(number) >= 0  # nothing after the number
    assert "#   strategy " in out  # purlin's extras are comments


def test_no_in_place_form_keeps_thirteen_fields(capsys):
    code, out, _ = bench(capsys, "all-to-all", "-b", 64, "-e", 64, "--ranks", 3, "--format", "nccl-tests")
    assert code == 0
    _, rows, _, _ = parse_like_a_log_reader(out)
    assert len(rows) == 1 and len(rows[0]) == 13 and rows[0][-4:] == ["N/A"] * 4
    float(rows[0][-6])  # out-of-place busbw still where a reader looks


def test_without_check_wrong_is_not_a_count(capsys):
    _, out, _ = bench(capsys, "all-reduce", "-b", 64, "-e", 64, "--ranks", 2, "-c", 0)
    _, rows, _, _ = parse_like_a_log_reader(out)
    assert rows[0][-5] == rows[0][-1] == "N/A"


def test_table_format_is_forced_and_fits_100_columns(capsys, monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setitem(common._consoles, "console", Console(width=100, file=buffer))
    code, _, _ = bench(
        capsys,
        "all-gather",
        "-b",
        64,
        "-e",
        1024,
        "-f",
        16,
        "--ranks",
        4,
        "--strategy",
        "all",
        "--baseline",
        "auto,default",
        "--format",
        "table",
    )
    assert code == 0
    lines = buffer.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 100
    assert sum(line.split()[:1] == ["ring"] for line in lines) == 2  # the strategy on a line of its own, once a size


def test_wide_table_keeps_one_line_a_row(capsys, monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setitem(common._consoles, "console", Console(width=220, file=buffer))
    bench(capsys, "all-gather", "-b", 64, "-e", 1024, "-f", 16, "--ranks", 4, "--strategy", "ring", "--format", "table")
    rows = [line for line in buffer.getvalue().splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2 and all(
        line.split()[-1] == "ring" and len(line.split()) == 17 for line in rows
    )  # 13 + baseline, vs, floor, strategy


def test_an_interrupted_run_keeps_its_rows_marked_incomplete(capsys, monkeypatch, tmp_path):
    real = Measurer.measure
    calls = []

    def measure(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Measurer, "measure", measure)
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    code, out, err = bench(capsys, "all-reduce", "-b", 64, "-e", 4096, "-f", 4, "--ranks", 2, "--json", js, "--csv", cs)
    assert code == 130
    _, rows, _, _ = parse_like_a_log_reader(out)
    assert [int(r[0]) for r in rows] == [64, 256]  # printed as measured
    data = json.loads(js.read_text())
    assert data["complete"] is False and [r["size"] for r in data["results"]] == [64, 256]
    table = list(csv.DictReader(cs.open()))
    assert [r["size"] for r in table] == ["64", "256"] and {r["complete"] for r in table} == {"0"}


def test_a_finished_run_is_marked_complete(capsys, tmp_path):
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    assert bench(capsys, "all-reduce", "-b", 64, "-e", 256, "-f", 4, "--ranks", 2, "--json", js, "--csv", cs)[0] == 0
    assert json.loads(js.read_text())["complete"] is True
    assert {r["complete"] for r in csv.DictReader(cs.open())} == {"1"}


def test_geometric_mean_counts_rows(capsys):
    _, out, _ = bench(capsys, "all", "-b", 64, "-e", 256, "-f", 4, "--ranks", 2, "--baseline", "auto")
    _, rows, _, _ = parse_like_a_log_reader(out)
    line = next(line for line in out.splitlines() if line.startswith("# Speed-up vs numpy"))
    assert f"over {len(rows)} rows" in line and len(rows) > 2


def test_unknown_format_is_refused(capsys):
    code, out, err = bench(capsys, "all-reduce", "--format", "box")
    assert code != 0 and "unknown --format 'box'" in err and not out


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        (
            TimingPolicy(iters=20, warmup=5, reps=5, graph=True),
            ["3 calls per batch", "1 warm-up call", "median of 3 batches", "capped", "no CUDA graphs"],
        ),
        (
            TimingPolicy(iters=1, warmup=0, reps=1, graph=False),
            ["1 calls per batch", "0 warm-up calls", "median of 1 batches"],
        ),
    ],
)
def test_numpy_header_says_the_timing_done(policy, says):
    label = NumpyBackend.time_label(NumpyBackend.__new__(NumpyBackend), policy)
    assert all(s in label for s in says)
    assert ("capped" in label) == (policy.iters > 3)


def test_header_names_asked_and_done(capsys):
    _, out, _ = bench(capsys, "all-reduce", "-b", 64, "-e", 64, "--ranks", 2)
    assert "# asked: -n 1 -w 0 -G 1" in out and "# timing: CPU wall clock, 1 calls per batch" in out


def test_the_json_file_has_no_nan_or_infinity(tmp_path):
    # JSON has no such numbers: a file with them was refused by purlin plot itself (audit 26, F9).
    from purlin_bench.tools.bench.report import write_json

    path = tmp_path / "r.json"
    write_json(path, [], {"copy_bandwidth_gbps": float("nan"), "peaks": [1.5, float("inf"), -float("inf")]}, "cmd")

    def refuse(name):
        raise AssertionError(f"{name} in the file")

    data = json.loads(path.read_text(), parse_constant=refuse)
    assert data["environment"] == {"copy_bandwidth_gbps": None, "peaks": [1.5, None, None]}
