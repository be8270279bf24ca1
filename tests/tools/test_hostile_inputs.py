"""Issue 29, hostile inputs: outputs that must not destroy what is at the
path, inputs read without bounds, exported C that could be injected, plan
content that was accepted. Each is one `purlin: error:` line and a non-zero
exit within seconds, or (for devices and FIFOs) a stream written as asked.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from purlin_bench.tools.export import ExportError
from purlin_bench.tools.export.header import render as header
from purlin_bench.plans import ArtifactError, load_plan_file
from tests.cli_refusal import purlin, refused

ROOT = Path(__file__).resolve().parents[2]
BENCH = ("bench", "all-reduce", "--backend", "numpy", "-e", "64", "-f", "8")
PLAN = ROOT / "results" / "h200" / "all-gather-8vr-float32.json"


@pytest.fixture
def plan_data() -> dict:
    if not PLAN.exists():
        pytest.skip("no committed plan")
    return json.loads(PLAN.read_text())


def write_plan(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


# -- class 1: outputs never replace a device node or a FIFO ------------------------


def _reader(fifo: Path, got: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(fifo, "rb") as handle:
            got.append(handle.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _outputs(tmp_path: Path) -> dict[str, tuple]:
    result = tmp_path / "r.json"
    return {
        "bench --json": (*BENCH, "--json"),
        "bench --csv": (*BENCH, "--csv"),
        "export --output": ("export", PLAN, "--format", "header", "--output"),
        "plot --output": ("plot", result, "--output"),
    }


@pytest.mark.parametrize("option", ["bench --json", "bench --csv", "export --output", "plot --output"])
def test_a_fifo_output_is_streamed_into_not_replaced(capsys, tmp_path, plan_data, option):
    assert purlin(capsys, *BENCH, "--json", tmp_path / "r.json")[0] == 0
    fifo = tmp_path / ("out.png" if option.startswith("plot") else "out")
    os.mkfifo(fifo)
    got: list[bytes] = []
    thread = _reader(fifo, got)
    code, _, err = purlin(capsys, *_outputs(tmp_path)[option], fifo)
    thread.join(10)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO
    assert got and got[0]  # written once, whole
    if option.startswith("bench --json"):
        assert json.loads(got[0])["complete"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.png" if option.startswith("plot") else "out", "r.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize("option", ["bench --json", "bench --csv", "export --output"])
def test_a_character_device_output_stays_a_device(capsys, tmp_path, plan_data, option):
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    code, _, err = purlin(capsys, *_outputs(tmp_path)[option], null)
    assert code == 0, err
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_fifo_nobody_reads_is_one_line_not_a_hang(capsys, tmp_path, plan_data):
    fifo = tmp_path / "out.h"
    os.mkfifo(fifo)
    refused(capsys, "a FIFO nobody reads", "export", PLAN, "--format", "header", "--output", fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_socket_output_is_refused(capsys, tmp_path):
    import socket

    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        refused(capsys, "is a socket", *BENCH, "--json", path)


def test_a_name_past_the_file_system_limit_is_one_line_before_work(capsys, tmp_path):
    refused(capsys, "a name of 300 bytes", *BENCH, "--json", tmp_path / ("x" * 300))


def test_a_long_output_name_does_not_fail_after_the_first_row(capsys, tmp_path):
    # The temp name was '.' + the name + 8 random + '.tmp': past 255 bytes
    # for a name of 250, so the second write of a sweep failed.
    path = tmp_path / ("r" * 250)
    code, _, err = purlin(capsys, *BENCH, "--json", path)
    assert code == 0, err
    assert json.loads(path.read_text())["complete"] is True


# -- class 3: inputs are regular files under a size cap ---------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--spec", "{f}"),
        ("check", "--spec", "{f}"),
        ("export", "{f}", "--format", "json"),
        ("plot", "{f}", "--output", "{tmp}/x.png"),
        ("tune", "all-reduce", "--sweep", "{f}", "--backend", "numpy"),
    ],
    ids=["list-spec", "check-spec", "export-plan", "plot-input", "tune-sweep"],
)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_an_input_that_is_not_a_regular_file_is_refused_at_once(capsys, tmp_path, args, kind):
    path = tmp_path / "in.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    line = refused(capsys, "not a regular file", *[str(a).format(f=path, tmp=tmp_path) for a in args])
    assert str(path) in line


def test_an_input_over_the_size_cap_is_refused_before_it_is_read(capsys, tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as handle:
        handle.truncate(64 << 20)  # sparse: no disk, but st_size says 64 MiB
    refused(capsys, "more than the 16 MiB", "list", "--spec", path)


# -- class 7 (files): numbers and nesting past any real file --------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("name: x\ndescription: " + "9" * 5000 + "\n", "a number of 5000 digits"),
        ("name: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than 64 levels"),
        (
            "name: x\ndescription: &a ["
            + ",".join(["x"] * 9)
            + "]\n"
            + "".join(f"k{i}: &b{i} [{','.join(['*a' if i == 0 else f'*b{i - 1}'] * 9)}]\n" for i in range(9)),
            "once its aliases are expanded",
        ),
    ],
    ids=["long-int", "deep", "alias-bomb"],
)
def test_a_hostile_yaml_is_one_line(capsys, tmp_path, text, fragment):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    refused(capsys, fragment, "list", "--spec", path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [('{"schema_version": ' + "1" * 5000 + "}", "a number of 5000 digits"), ("[" * 100_000 + "]" * 100_000, "nested")],
    ids=["long-int", "deep"],
)
@pytest.mark.parametrize("command", ["export", "plot"])
def test_a_hostile_json_is_one_line(capsys, tmp_path, text, fragment, command):
    path = tmp_path / "p.json"
    path.write_text(text)
    args = (
        ("export", path, "--format", "json") if command == "export" else ("plot", path, "--output", tmp_path / "x.png")
    )
    refused(capsys, fragment, *args)


def test_plot_of_rows_of_the_wrong_shape_or_sign_is_one_line(capsys, tmp_path):
    assert purlin(capsys, *BENCH, "--json", tmp_path / "r.json")[0] == 0
    data = json.loads((tmp_path / "r.json").read_text())
    for change, fragment in (
        (lambda r: r.update(size=-8), "size"),
        (lambda r: r["out_of_place"].update(time=-1.0), "time"),
        (lambda r: r.update(out_of_place=[1, 2]), "out_of_place"),
        (lambda r: r.pop("strategy"), "strategy"),
    ):
        bad = json.loads(json.dumps(data))
        change(bad["results"][0])
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        line = refused(capsys, fragment, "plot", path, "--output", tmp_path / "x.png")
        assert "results[0]" in line
    assert not (tmp_path / "x.png").exists()


# -- classes 2 and 8: a plan's content, checked when read and when exported ----------------


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d: d.update(created="2026-01-01 */\n#include </etc/passwd>\n/*"), "created"),
        (lambda d: d.update(package_version="0.1 */ int x; /*"), "package_version"),
        (lambda d: d["entries"][0]["config"]["plan_params"].update(channels=-5), "channels"),
        (lambda d: d["entries"][0]["config"]["plan_params"].update(channels=10**15), "channels"),
        (lambda d: d["entries"][0]["config"]["plan_params"].update(bogus=1), "bogus"),
        (lambda d: d["entries"][0]["config"]["exec_params"].update(bogus=1), "bogus"),
        (lambda d: d["entries"][0]["config"]["exec_params"].update(threads=7), "threads"),
        (lambda d: d.update(ranks=1_000_000), "at most 64 ranks"),
        (lambda d: d.update(ranks=4), "contradicts"),
        (lambda d: (d.update(ranks=4), d["fingerprint"].update(ranks=4)), "not a layout of 4 ranks"),
        (lambda d: d["fingerprint"].update(device_name="GPU\x1b[2J"), "device_name"),
    ],
    ids=[
        "created",
        "version",
        "negative-channels",
        "huge-channels",
        "unknown-plan-param",
        "unknown-exec-param",
        "bad-threads",
        "million-ranks",
        "ranks-vs-fingerprint",
        "ranks-vs-layout",
        "escape-in-name",
    ],
)
def test_a_plan_purlin_would_not_write_is_refused_by_export_and_load_plan(
    capsys, tmp_path, plan_data, change, fragment
):
    change(plan_data)
    path = write_plan(tmp_path, plan_data)
    line = refused(capsys, fragment, "export", path, "--format", "header")
    assert "\n" not in line and "\x1b" not in line
    with pytest.raises(ArtifactError, match=fragment.split()[0]):
        load_plan_file(path)


def test_the_header_escapes_every_comment_field_and_range_checks_numbers(plan_data):
    plan = load_plan_file(PLAN)
    text = header(replace(plan, created="x */\nint evil; /*", package_version="1\n#define X"), "p.json")
    comments = text.split("#ifndef")[0]
    assert comments.count("*/") == 1 and "\n#define X" not in text  # the comment closes once, at its end
    entry = plan.entries[0]
    big = replace(entry, config=replace(entry.config, plan_params=(("channels", 1 << 40),)))
    with pytest.raises(ExportError, match="does not fit the header's int32_t"):
        header(replace(plan, entries=(big, *plan.entries[1:])), "p.json")


def test_json_to_dev_stdout_redirected_to_a_file_appends_once(tmp_path):
    """/dev/stdout names the shell's file: the JSON is appended to it, once,
    after the table, not renamed over it (which dropped the table, and as
    root made a regular file in /dev)."""
    import subprocess
    import sys

    out = tmp_path / "out.txt"
    with open(out, "w") as handle:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from purlin_bench.cli.main import run; run()",
                *BENCH,
                "--format",
                "nccl-tests",
                "--json",
                "/dev/stdout",
            ],
            stdout=handle,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("# purlin bench") and text.count('"schema"') == 1
    assert json.loads(text[text.index("{") :])["complete"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
