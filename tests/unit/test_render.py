"""program/render.py: the facts `purlin show` prints, as plain data."""

from __future__ import annotations

import io

from rich.console import Console

from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import Ref
from purlin_bench.program.render import render_rich, rows, slice_text, summarize
from purlin_bench.spec import instantiate, load_builtin


def _program(name, strategy, ranks, count, **params):
    return derive_program(instantiate(load_builtin(name), ranks, count, 4), strategy, "float32", params=params)


def test_slice_text_marks_remote_memory():
    assert slice_text(Ref(2, "in", 8, 4), here=2) == "in[8:12)"
    assert slice_text(Ref(3, "scratch", 0, 16), here=2) == "r3.scratch[0:16)"


def test_rows_of_a_direct_all_reduce():
    p = _program("all-reduce", "direct", ranks=2, count=8)
    found = [row.cells() for row in rows(p, 0, 0)]
    assert found == [
        ("0", "Stage", "in place", "-", "in[0:8)", "-", "-", "-"),
        ("1", "Notify", "release", "r1", "-", "-", "-> r1.flag[0]", "ready"),
        ("2", "Consume", "reduce (pull)", "r1", "in[0:8) + r1.in[0:8)", "out[0:8)", "r0.flag[0] <- r1", "ready"),
        ("3", "Notify", "release", "r1", "-", "-", "-> r1.flag[1]", "done"),
        ("4", "Consume", "wait", "r1", "-", "-", "r0.flag[1] <- r1", "done"),
    ]


def test_summary_counts_remote_traffic():
    p = _program("all-reduce", "direct", ranks=8, count=8192)
    s = summarize(p)
    assert s.steps == p.step_count() == s.stages + s.notifies + s.consumes
    assert s.scratch_elems == 0 and s.flags == sum(p.flag_counts)
    # one-shot pull: every rank reads the whole buffer of each of its 7 peers
    assert s.remote_writes == 0
    assert s.remote_read_bytes == 8 * 7 * 8192 * 4
    for t in s.per_rank:
        assert t.reads_from == tuple(range(8)) and t.writes_to == (t.rank,)

    push = summarize(_program("all-gather", "push", ranks=8, count=100))
    assert push.remote_reads == 0 and push.remote_write_bytes == 8 * 7 * 100 * 4
    assert all(t.writes_to == tuple(range(8)) for t in push.per_rank)


def test_rich_renders_every_list():
    p = _program("reduce-scatter", "ring", ranks=3, count=64, channels=2, slice_bytes=64)
    buffer = io.StringIO()
    Console(file=buffer, width=200).print(render_rich(p))
    text = buffer.getvalue()
    assert (
        text.splitlines()[0]
        == "reduce-scatter / ring, 3 ranks, count 64 float32, reduce sum, out of place, channels=2 slice_bytes=64"
    )
    for rank in range(3):
        for channel in range(2):
            assert f"rank {rank} / channel {channel} ({len(p.lists[rank][channel])} steps)" in text
    assert f"steps: {p.step_count()}" in text
    # one table row per step: a row opens with its step number and its kind
    cells = [[c for c in line.split() if c != "│"] for line in text.splitlines()]
    assert (
        sum(1 for c in cells if len(c) > 1 and c[0].isdigit() and c[1] in ("Stage", "Notify", "Consume"))
        == p.step_count()
    )
