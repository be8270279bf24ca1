"""`purlin bench` and `purlin plot` on the numpy backend (no GPU): nccl-tests'
size and bus-bandwidth conventions, the JSON/CSV shapes, #wrong failing the
exit code, and bad input as one line."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from purlin_bench.cli.main import run
from purlin_bench.strategies import STRATEGIES


def purlin(capsys, *args) -> tuple[int, str, str]:
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, fragment: str) -> None:
    assert code != 0
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("purlin: error: ") and fragment in lines[0], err


def bench_json(capsys, tmp_path, *args) -> dict:
    path = tmp_path / "out.json"
    code, out, err = purlin(
        capsys, "bench", *args, "--backend", "numpy", "-n", "1", "-w", "0", "-G", "1", "--json", path
    )
    assert code == 0, err
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("name", "size", "count", "factor"),
    [
        # nccl-tests: S = count x type for all-reduce, broadcast, reduce; x ranks for the rest
        ("all-reduce", 256, 64, 2 * 3 / 4),
        ("broadcast", 256, 64, 1.0),
        ("reduce", 256, 64, 1.0),
        ("all-gather", 256, 16, 3 / 4),
        ("reduce-scatter", 256, 16, 3 / 4),
        ("all-to-all", 256, 16, 3 / 4),
        ("gather", 256, 16, 3 / 4),
        ("scatter", 256, 16, 3 / 4),
    ],
)
def test_sizes_counts_and_bus_bandwidth_follow_nccl_tests(capsys, tmp_path, name, size, count, factor):
    data = bench_json(capsys, tmp_path, name, "-b", size, "-e", size, "--ranks", 4)
    (row,) = data["results"]
    assert (row["collective"], row["size"], row["count"], row["type"]) == (name, size, count, "float32")
    oop = row["out_of_place"]
    assert set(oop) == {"time", "alg_bw", "bus_bw", "nwrong"} and oop["nwrong"] == 0
    assert oop["alg_bw"] == pytest.approx(size / (oop["time"] * 1e-6) / 1e9)
    assert oop["bus_bw"] == pytest.approx(oop["alg_bw"] * factor)
    # all-to-all has no in-place form; the rest report it, checked too
    if name == "all-to-all":
        assert row["in_place"] is None
    else:
        assert row["in_place"]["nwrong"] == 0
    assert row["redop"] == ("sum" if name in ("all-reduce", "reduce", "reduce-scatter") else "none")
    assert data["environment"]["backend"] == "numpy" and data["command"].startswith(f"purlin bench {name}")


def test_sweep_every_strategy_and_the_summary(capsys, tmp_path):
    path, table = tmp_path / "r.json", tmp_path / "r.csv"
    code, out, err = purlin(
        capsys,
        "bench",
        "all-gather",
        "-b",
        64,
        "-e",
        1024,
        "-f",
        4,
        "--ranks",
        3,
        "--strategy",
        "all",
        "--backend",
        "numpy",
        "-n",
        1,
        "-w",
        0,
        "-G",
        1,
        "--json",
        path,
        "--csv",
        table,
    )
    assert code == 0, err
    rows = json.loads(path.read_text())["results"]
    # 64, 256, 1024 bytes (counts 5, 21, 85: whole elements per chunk) x every strategy
    assert {r["size"] for r in rows} == {60, 252, 1020}
    assert {r["strategy"].split("(")[0] for r in rows} == {"direct", "push", "push-parity", "two-shot", "ring"}
    assert len(rows) == 3 * len(STRATEGIES) and all(r["out_of_place"]["nwrong"] == 0 for r in rows)
    assert all(r["baselines"].get("numpy", 0) > 0 and r["speedup"]["numpy"] > 0 for r in rows)
    lines = list(csv.DictReader(table.open()))
    assert len(lines) == 3 * len(STRATEGIES) and {"oop_time_us", "oop_busbw", "oop_nwrong", "numpy_us"} <= set(lines[0])
    assert "# Out of bounds values : 0 OK" in out and "# Avg bus bandwidth" in out and "# Speed-up vs numpy" in out


def test_wrong_outputs_fail_the_exit_code_and_are_counted(capsys, tmp_path, monkeypatch):
    from purlin_bench.backends.numpy.executor import NumpyRunner

    honest = NumpyRunner.outputs

    def off_by_one(self, slot=0):
        outs = honest(self, slot)
        outs[0][0] += 1
        return outs

    monkeypatch.setattr(NumpyRunner, "outputs", off_by_one)
    path = tmp_path / "w.json"
    code, out, err = purlin(
        capsys,
        "bench",
        "all-reduce",
        "-b",
        64,
        "-e",
        64,
        "--ranks",
        2,
        "--backend",
        "numpy",
        "-n",
        1,
        "-w",
        0,
        "-G",
        1,
        "--json",
        path,
    )
    assert_one_line_error(code, err, "some outputs were wrong (see #wrong)")
    (row,) = json.loads(path.read_text())["results"]
    assert row["out_of_place"]["nwrong"] == 1 and row["in_place"]["nwrong"] == 1
    assert "FAILED" in out


def test_auto_backend_without_gpu_says_so_once(capsys, monkeypatch):
    from purlin_bench.backends.cupy import CupyBackend

    monkeypatch.setattr(CupyBackend, "available", classmethod(lambda cls: "no CUDA GPU found"))
    code, out, err = purlin(capsys, "bench", "all-reduce", "-b", 8, "-e", 8, "-n", 1, "-w", 0, "-G", 1)
    assert code == 0
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "numpy" in notes[0] and "CPU times" in notes[0]
    assert "numpy CPU reference" in out


def test_plot_draws_a_png_from_bench_json(capsys, tmp_path):
    data = bench_json(capsys, tmp_path, "all-reduce", "-b", 8, "-e", 4096, "-f", 8, "--ranks", 2, "--strategy", "all")
    assert len(data["results"]) == 4 * len(STRATEGIES)
    png = tmp_path / "p.png"
    code, out, err = purlin(capsys, "plot", tmp_path / "out.json", "--output", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_strategy_all_leaves_out_a_strategy_the_datapath_refuses_and_times_the_rest(capsys, tmp_path, monkeypatch):
    """A strategy too large for one compiled launch at a size (CapacityError)
    ended the whole --strategy all sweep on the GPU; it is left out with a
    line on stdout naming it, the others timed. Asked for alone, it is still
    an error; every strategy refused is an error too."""
    from purlin_bench.base.errors import CapacityError
    from purlin_bench.tools.bench.measure import Measurer

    real = Measurer.measure

    def refuse_ring(self, inst, config, *args, **kwargs):
        if config.strategy == "ring":
            raise CapacityError("this program is too large for one compiled launch (a test's refusal)")
        return real(self, inst, config, *args, **kwargs)

    monkeypatch.setattr(Measurer, "measure", refuse_ring)
    data = bench_json(capsys, tmp_path, "all-reduce", "-b", 8, "-e", 64, "-f", 8, "--ranks", 2, "--strategy", "all")
    assert len(data["results"]) == 2 * (len(STRATEGIES) - 1)
    assert {r["config"]["strategy"] for r in data["results"]} == set(STRATEGIES) - {"ring"}
    code, out, err = purlin(capsys, "bench", "all-reduce", "--backend", "numpy", "-b", 8, "-e", 8, "--ranks", 2,
                            "--strategy", "all", "-n", "1", "-w", "0", "-G", "1")
    notes = [line for line in out.splitlines() if "left out" in line]
    assert code == 0 and len(notes) == 1 and "ring left out at 8 B: this program is too large" in notes[0], out
    code, out, err = purlin(capsys, "bench", "all-reduce", "--backend", "numpy", "-b", 8, "-e", 8, "--ranks", 2,
                            "--strategy", "ring", "-n", "1", "-w", "0", "-G", "1")
    assert_one_line_error(code, err, "too large for one compiled launch")
    # Every strategy refused: an error, not an empty table that exits 0, and no result file.
    monkeypatch.setattr(Measurer, "measure", lambda *a, **k: (_ for _ in ()).throw(CapacityError("refused")))
    path = tmp_path / "none.json"
    code, out, err = purlin(capsys, "bench", "all-reduce", "--backend", "numpy", "-b", 8, "-e", 8, "--ranks", 2,
                            "--strategy", "all", "-n", "1", "-w", "0", "-G", "1", "--json", path)
    assert_one_line_error(code, err, "nothing was timed")
    assert not path.exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["all-reduce", "--unroll", "4"], "--unroll is a datapath parameter of cupy, not of backend numpy"),
        (["all-reduce", "--datapath", "ce"], "is a datapath parameter of cupy, fake, not of backend numpy"),
        (["all-reduce", "-b", "2K", "-e", "1K"], "--maxbytes (1024) is smaller than --minbytes (2048)"),
        (["all-reduce", "-f", "1"], "--stepfactor must be at least 2"),
        (["all-reduce", "-b", "lots"], "--minbytes: expected a size like"),
        (["all-reduce", "-e", "2000000T"], "--maxbytes: '2000000T' is above the largest size"),
        (["all-reduce", "--slice-bytes", "1.5"], "--slice-bytes: '1.5' is not a whole number of bytes"),
        (["all-reduce", "--slice-bytes", "4Q"], "--slice-bytes: expected a size like"),
        (["all-reduce", "-d", "float8"], "unknown dtype 'float8'"),
        (["all-reduce", "-o", "avg"], "unknown reduction 'avg'"),
        (["all-reduce", "-n", "0"], "--iters must be >= 1, got 0"),
        (["all-reduce", "-w", "-1"], "--warmup_iters must be >= 0, got -1"),
        (["all-reduce", "-G", "-1"], "--cudagraph must be >= 0, got -1"),
        (["all-reduce", "-b", "1T"], "--minbytes (1099511627776) is above this backend's default --maxbytes (1048576)"),
        (["all-reduce", "--ranks", "4", "-r", "4"], "--root 4 is out of range for 4 ranks"),
        (["all-reduce", "--baseline", "mpi"], "unknown baseline 'mpi' here (known: auto, numpy, default, none)"),
        (["gather", "--ranks", "4", "-r", "4"], "--root 4 is out of range for 4 ranks"),
        (["teleport"], "teleport"),
        (["all-reduce", "--strategy", "tree"], "unknown strategy 'tree'"),
        (["all-reduce", "--gpus", "0,1"], "--gpus"),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, args, fragment):
    path = tmp_path / "never.json"
    code, _, err = purlin(capsys, "bench", *args, "--backend", "numpy", "--json", path)
    assert_one_line_error(code, err, fragment)
    assert not path.exists()


def test_slice_bytes_takes_a_size_with_a_unit(capsys, tmp_path):
    # --slice-bytes was a plain int option here while `purlin show` took 4K.
    data = bench_json(
        capsys,
        tmp_path,
        "all-reduce",
        "--slice-bytes",
        "4K",
        "-b",
        "64K",
        "-e",
        "64K",
        "--ranks",
        4,
        "--strategy",
        "ring",
    )
    assert [r["config"]["plan_params"]["slice_bytes"] for r in data["results"]] == [4096]
    assert [r["size"] for r in data["results"]] == [65536]


def test_slice_bytes_4k_with_the_default_strategy(capsys):
    code, out, err = purlin(
        capsys,
        "bench",
        "all-reduce",
        "--slice-bytes",
        "4K",
        "-e",
        "64K",
        "--backend",
        "numpy",
        "-n",
        "1",
        "-w",
        "0",
        "-G",
        "1",
        "--ranks",
        2,
    )
    assert code == 0, err
    assert "slice_bytes=4096" in out and "65536" in out


@pytest.mark.parametrize(
    ("content", "fragment"),
    [("{not json", "not valid JSON"), ('{"results": [{"size": 1}]}', "not a purlin bench result")],
)
def test_plot_refuses_what_is_not_a_bench_result(capsys, tmp_path, content, fragment):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, _, err = purlin(capsys, "plot", bad, "--output", tmp_path / "x.png")
    assert_one_line_error(code, err, fragment)
    assert not (tmp_path / "x.png").exists()


def test_exact_inputs_make_every_dtype_exact(capsys, tmp_path):
    """bfloat16 and int32 sums over 8 ranks compare bit for bit: #wrong is 0."""
    for dtype in ("bfloat16", "int32", "float16"):
        data = bench_json(capsys, tmp_path, "all-reduce", "-b", 1024, "-e", 1024, "-d", dtype, "--ranks", 8)
        (row,) = data["results"]
        assert row["type"] == dtype and row["out_of_place"]["nwrong"] == 0 and row["in_place"]["nwrong"] == 0
    assert np.isfinite(row["out_of_place"]["time"])


def test_default_as_a_baseline_rates_a_configuration_in_the_same_run(capsys, tmp_path):
    data = bench_json(
        capsys,
        tmp_path,
        "all-reduce",
        "-b",
        64,
        "-e",
        4096,
        "-f",
        64,
        "--ranks",
        4,
        "--strategy",
        "ring",
        "--baseline",
        "auto,default",
    )
    assert len(data["results"]) == 2
    for row in data["results"]:
        assert row["strategy"].startswith("ring") and set(row["baselines"]) == {"numpy", "default"}
        assert row["speedup"]["default"] == pytest.approx(row["baselines"]["default"] / row["out_of_place"]["time"])


def test_a_wrong_default_is_an_error_not_a_baseline(capsys, tmp_path, monkeypatch):
    from purlin_bench.backends.numpy.executor import NumpyRunner

    honest = NumpyRunner.outputs

    def two_shot_is_broken(self, slot=0):
        outs = honest(self, slot)
        if self.program.strategy == "two-shot":  # the default of all-reduce
            outs[0] = outs[0] + 1
        return outs

    monkeypatch.setattr(NumpyRunner, "outputs", two_shot_is_broken)
    code, _, err = purlin(
        capsys,
        "bench",
        "all-reduce",
        "-b",
        64,
        "-e",
        64,
        "--ranks",
        2,
        "--strategy",
        "ring",
        "--baseline",
        "default",
        "--backend",
        "numpy",
        "-n",
        1,
        "-w",
        0,
        "-G",
        1,
    )
    assert_one_line_error(
        code, err, "the default configuration two-shot(channels=1, slice_bytes=0) gave 16 wrong elements"
    )
