"""Issue 15, bad inputs: each class is refused with one `purlin: error:` line
on stderr, a non-zero exit, nothing on stdout and no file written, before any
measuring (these run in seconds on the numpy backend).

Classes: binary files for every file input; every output-path option; every
bound (ranks, channels, spec loops, memory); values that were accepted and
silently meant something else; stdout that cannot be written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from purlin_bench.cli import common, limits
from tests import cli_refusal
from tests.cli_refusal import purlin

BINARY = bytes(range(128, 256)) * 4  # not UTF-8 from its first byte


def refused(capsys, fragment: str, *args) -> str:
    return cli_refusal.refused(capsys, fragment, *args, seconds=30)


@pytest.fixture
def binary(tmp_path) -> Path:
    path = tmp_path / "blob.yaml"
    path.write_bytes(BINARY)
    return path


@pytest.fixture
def binary_json(tmp_path) -> Path:
    path = tmp_path / "blob.json"
    path.write_bytes(BINARY)
    return path


# -- binary files, every file input ----------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("check", "{yaml}"), "yaml"),
        (("check", "--spec", "{yaml}"), "yaml"),
        (("show", "--spec", "{yaml}"), "yaml"),
        (("list", "--spec", "{yaml}"), "yaml"),
        (("bench", "{yaml}", "--backend", "numpy", "-e", "64"), "yaml"),
        (("tune", "all-reduce", "--sweep", "{yaml}", "--backend", "numpy"), "yaml"),
        (("export", "{json}", "--format", "json"), "json"),
        (("export", "{json}", "--format", "json", "--spec", "{yaml}"), "yaml"),
        (("bench", "all-reduce", "--plan", "{json}", "--backend", "numpy", "-e", "64"), "json"),
        (("plot", "{json}", "--output", "{tmp}/x.png"), "json"),
    ],
    ids=[
        "check",
        "check-spec",
        "show-spec",
        "list-spec",
        "bench-spec",
        "tune-sweep",
        "export-plan",
        "export-spec",
        "bench-plan",
        "plot-input",
    ],
)
def test_a_binary_file_is_one_line_naming_it(capsys, tmp_path, binary, binary_json, args, named):
    files = {"yaml": binary, "json": binary_json}
    line = refused(capsys, "not UTF-8", *[a.format(tmp=tmp_path, **files) for a in args])
    assert str(files[named]) in line
    assert not (tmp_path / "x.png").exists()


# -- output paths, every option, checked before measuring ---------------------------

BENCH = ("bench", "all-reduce", "--backend", "numpy", "-e", "64")


def _outputs(tmp_path, plan_file):
    return {
        "bench --json": (*BENCH, "--json"),
        "bench --csv": (*BENCH, "--csv"),
        "bench --plot": (*BENCH, "--plot"),
        "export --output": ("export", plan_file, "--format", "json", "--output"),
        "plot --output": ("plot", tmp_path / "r.json", "--output"),
    }


@pytest.fixture
def plan_file() -> Path:
    found = sorted((Path(__file__).resolve().parents[2] / "results").rglob("all-reduce-*.json"))
    if not found:
        pytest.skip("no committed plan to export")
    return found[0]


@pytest.fixture
def bench_result(capsys, tmp_path) -> Path:
    path = tmp_path / "r.json"
    assert purlin(capsys, *BENCH, "--json", path)[0] == 0
    return path


@pytest.mark.parametrize("option", ["bench --json", "bench --csv", "bench --plot", "export --output", "plot --output"])
@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("{tmp}/folder", "is a folder"),
        ("{tmp}/missing/x.png", "does not exist"),
        ("/proc/x.png", "cannot write in /proc"),
        ("{tmp}/afile/x.png", "is not a folder"),
    ],
    ids=["existing-folder", "missing-folder", "proc", "parent-is-a-file"],
)
def test_every_output_option_is_checked_first(capsys, tmp_path, plan_file, bench_result, option, target, fragment):
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    args = _outputs(tmp_path, plan_file)[option]
    line = refused(capsys, fragment, *args, target.format(tmp=tmp_path))
    assert args[-1] in line  # names the option
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, no temp file
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("args", [(*BENCH, "--plot"), ("plot", "{tmp}/r.json", "--output")], ids=["bench", "plot"])
def test_a_plot_extension_matplotlib_cannot_write_is_refused_with_the_known_ones(capsys, tmp_path, bench_result, args):
    filled = [str(a).format(tmp=tmp_path) for a in args]
    line = refused(capsys, "'.jpgg' is not an image format", *filled, tmp_path / "x.jpgg")
    assert "png" in line and "svg" in line
    assert not (tmp_path / "x.jpgg").exists()


@pytest.mark.parametrize(("a", "b"), [("--json", "--csv"), ("--json", "--plot"), ("--csv", "--plot")])
def test_two_outputs_naming_one_file_are_refused(capsys, tmp_path, a, b):
    same = tmp_path / "x.png"
    refused(capsys, "one would overwrite the other", *BENCH, a, same, b, same)
    assert not same.exists()


@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "hardlink"])
@pytest.mark.parametrize("case", ["bench --spec, --json", "bench --spec, --csv", "bench --plan, --json",
                                  "export PLAN, --output", "export --spec, --output"])
def test_an_output_naming_an_input_is_refused_and_the_input_kept(capsys, tmp_path, monkeypatch, plan_file, case,
                                                                 spelling):
    spec = tmp_path / "mine.yaml"
    spec.write_text((Path(__file__).resolve().parents[2] / "collectives" / "all-to-all.yaml").read_text())
    plan = tmp_path / "plan.json"
    plan.write_text(plan_file.read_text())
    target = plan if "PLAN" in case or "--plan" in case else spec
    args = {
        "bench --spec, --json": ("bench", "--spec", spec, "--backend", "numpy", "-e", "64", "--json"),
        "bench --spec, --csv": ("bench", "--spec", spec, "--backend", "numpy", "-e", "64", "--csv"),
        "bench --plan, --json": (*BENCH, "--plan", plan, "--json"),
        "export PLAN, --output": ("export", plan, "--format", "csv", "--output"),
        "export --spec, --output": ("export", plan, "--format", "csv", "--spec", spec, "--output"),
    }[case]
    before = target.read_bytes()
    monkeypatch.chdir(tmp_path)
    out = {"same": target, "relative": Path(".") / "sub" / ".." / target.name, "symlink": tmp_path / "link",
           "hardlink": tmp_path / "hard"}[spelling]
    (tmp_path / "sub").mkdir()
    if spelling == "symlink":
        out.symlink_to(target)
    if spelling == "hardlink":
        os.link(target, out)
    line = refused(capsys, "this command reads; write the results elsewhere", *args, out)
    assert args[-1] in line and target.read_bytes() == before


@pytest.mark.parametrize("args", [(*BENCH, "--json"), (*BENCH, "--csv"), (*BENCH, "--plot"),
                                  ("tune", "all-reduce", "--backend", "numpy", "--out"),
                                  ("export", "{plan}", "--format", "json", "--output")],
                         ids=["bench --json", "bench --csv", "bench --plot", "tune --out", "export --output"])
def test_an_empty_output_path_is_refused_not_read_as_the_current_folder(capsys, tmp_path, monkeypatch, plan_file,
                                                                         args):
    # Read as '.', tune --out '' tuned and wrote its plans and tune.db into the current folder.
    monkeypatch.chdir(tmp_path)
    refused(capsys, f"{args[-1]}: empty path", *[str(a).format(plan=plan_file) for a in args], "")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_rank_list_is_refused_not_read_as_the_default(capsys):
    refused(capsys, "--ranks is empty (leave the option out for its default)", "check", "all-to-all-v", "--ranks", "")


def test_a_value_listed_twice_runs_once(capsys):
    code, out, _ = purlin(capsys, "check", "all-gather,all-gather", "--ranks", "2,2,3", "--count", "8,8",
                          "-d", "float32,float32", "-s", "ring", "--json")
    assert code == 0
    rows = json.loads(out)["results"]
    assert sorted((r["ranks"], r["inplace"]) for r in rows) == [(2, False), (2, True), (3, False), (3, True)]


def test_one_spec_file_named_twice_however_spelt_runs_once(tmp_path, monkeypatch):
    from purlin_bench.cli.targets import many_specs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text((Path(__file__).parents[2] / "collectives" / "all-gather.yaml").read_text())
    specs = many_specs("mine.yaml,./mine.yaml", [str(tmp_path / "mine.yaml")])
    assert [s.name for s in specs] == ["all-gather"]
    assert [s.name for s in many_specs("all-gather", ["mine.yaml"])] == ["all-gather", "all-gather"]  # two files


def test_gpus_keep_a_gpu_named_twice_in_place():
    class Devices:  # a backend with GPUs, none needed to parse the list
        name, has_devices = "fake", True

    # Under --procs several ranks may share a GPU: rank i takes the i-th entry.
    assert common.gpu_devices("0,0,1,1", Devices) == [0, 0, 1, 1]


def test_tune_out_that_is_a_file_is_refused(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    refused(capsys, "is a file, not a folder", "tune", "all-reduce", "--backend", "numpy", "--out", tmp_path / "f")


def test_outputs_are_readable_by_others_whatever_the_umask(capsys, tmp_path):
    old = os.umask(0o077)
    try:
        code, _, err = purlin(
            capsys, *BENCH, "--json", tmp_path / "r.json", "--csv", tmp_path / "r.csv", "--plot", tmp_path / "r.png"
        )
    finally:
        os.umask(old)
    assert code == 0, err
    for name in ("r.json", "r.csv", "r.png"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name


# -- bounds, each with the bound and why -------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("show", "all-reduce", "--ranks", "10000"),
        ("check", "all-reduce", "--ranks", "2,10000"),
        ("bench", "all-reduce", "--backend", "numpy", "--ranks", "10000"),
        ("tune", "all-reduce", "--backend", "numpy", "--ranks", "10000"),
    ],
    ids=["show", "check", "bench", "tune"],
)
def test_rank_count_bound(capsys, args):
    line = refused(capsys, "at most 64 ranks", *args)
    assert "10000" in line and "shared-memory" in line


@pytest.mark.parametrize("args", [("show", "all-reduce"), BENCH], ids=["show", "bench"])
def test_channel_bound(capsys, args):
    line = refused(capsys, "must be in [1, 64], got 100000", *args, "--channels", "100000")
    assert "thread-block group" in line


@pytest.mark.parametrize(
    "loops",
    [["i in range(1000000000)"], ["i in range(100000)", "j in range(100000)"], ["i in range(200)", "j in range(200)"]],
    ids=["one-huge-loop", "two-nested-1e5", "nested-just-over"],
)
def test_spec_loop_bound(capsys, tmp_path, loops):
    spec = tmp_path / "loopy.yaml"
    names = ", ".join(l.split()[0] for l in loops)
    body = "\n".join(f"      - {l}" for l in loops)
    spec.write_text(
        f"name: loopy\nop: copy\ninput:\n  - chunk: c(r, {names})\n    for:\n{body}\n"
        f"output:\n  - chunk: c(r, {names})\n    for:\n{body}\n"
    )
    refused(capsys, "more than 8192 iterations", "list", "--spec", spec)


def test_spec_loops_under_the_bound_still_load(capsys):
    # all-to-all at 64 ranks: the largest built-in layout under the bound
    from purlin_bench.spec.instance import instantiate
    from purlin_bench.spec.loader import load_builtin

    inst = instantiate(load_builtin("all-to-all"), 64, 1, 4)
    assert len(inst.inputs[0]) == 64


@pytest.mark.parametrize(
    "args",
    [
        ("check", "all-reduce", "--ranks", "2", "--count", "100000000000"),
        ("bench", "all-reduce", "--backend", "numpy", "-e", "100G"),
        ("bench", "all-gather", "--backend", "numpy", "-e", "1T"),
    ],
    ids=["check-count", "bench-maxbytes", "bench-copy"],
)
def test_memory_bound_on_the_cpu_says_need_and_have(capsys, args):
    line = refused(capsys, "GiB of memory on the numpy backend", *args)
    assert "is available" in line


def test_memory_estimate_grows_with_the_instance():
    from purlin_bench.spec.instance import instantiate
    from purlin_bench.spec.loader import load_builtin

    spec = load_builtin("all-reduce")
    small, big = (limits.needed_bytes(instantiate(spec, 2, n, 4), 4) for n in (1 << 10, 1 << 28))
    assert big >= 2 * 2 * (1 << 28) * 4 > small  # at least both ranks' input and output


# -- accepted before, meaning something else -----------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((*BENCH, "-c", "5"), "--check takes 0 or 1, got 5"),
        ((*BENCH, "--baseline", "nccl"), "unknown baseline 'nccl'"),
        ((*BENCH, "--baseline", "cupy"), "unknown baseline 'cupy'"),
        (("bench", "all-gather", "--backend", "numpy", "-e", "64", "--op", "max"), "all-gather is a copy collective"),
        (("check", "all-gather", "--op", "max"), "all-gather is a copy collective"),
        (("tune", "all-reduce", "--backend", "numpy", "--sizes", ""), "--sizes is empty"),
        (("tune", "all-reduce", "--backend", "numpy", "--sizes", ","), "--sizes is empty"),
        (("tune", "all-reduce", "--backend", "numpy", "--dtype", ""), "--dtype is empty"),
        (("tune", "all-reduce", "--backend", "numpy", "--storage", ""), "--storage is empty"),
    ],
    ids=[
        "check-5",
        "baseline-nccl",
        "baseline-cupy",
        "bench-op-copy",
        "check-op-copy",
        "sizes-empty",
        "sizes-comma",
        "dtype-empty",
        "storage-empty",
    ],
)
def test_values_that_meant_something_else_are_refused(capsys, args, fragment):
    refused(capsys, fragment, *args)


def test_op_on_all_collectives_is_kept_for_the_reductions(capsys):
    # 'all' mixes copies and reductions: --op applies to the reductions
    code, _, err = purlin(
        capsys, "check", "all", "--op", "max", "--ranks", "2", "--strategy", "direct", "--count", "3", "--no-inplace"
    )
    assert code == 0, err


def test_sqlite_storage_in_a_missing_folder_is_refused_not_created(capsys, tmp_path):
    url = f"sqlite:///{tmp_path}/missing/dir/x.db"
    refused(capsys, "does not exist", "tune", "all-reduce", "--backend", "numpy", "--storage", url)
    assert not (tmp_path / "missing").exists()


# -- stdout that cannot be written ----------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [("show", "all-reduce", "--json"), ("list", "--json"), ("list",)],
    ids=["show-json", "list-json", "list-table"],
)
def test_stdout_on_a_full_disk_is_one_line(args):
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", "from purlin_bench.cli.main import run; run()", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == ["purlin: error: cannot write to stdout: No space left on device"], proc.stderr
