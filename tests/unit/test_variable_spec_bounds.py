"""Hostile or mistaken ``count: variable`` specs (audit 26): what they cost to
load, what a draw of their counts allocates, and the specs that loaded but made
bench or tune crash, now refused at load in one line."""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from purlin_bench.base.errors import SpecError
from purlin_bench.spec import Place, instantiate, load_all_builtin, load_builtin, load_spec_file
from purlin_bench.spec import instance
from purlin_bench.spec.instance import MAX_VARIABLE_CHUNKS, Prefix
from purlin_bench.spec.loader import parse_spec
from purlin_bench.spec.variable import DISTRIBUTIONS, counts_for_total, draw_counts


def _spec(inputs, outputs, **extra) -> dict:
    return {"name": "my-v", "op": "copy", "count": "variable", "input": inputs, "output": outputs, **extra}


def _wide(n: int, **extra) -> dict:
    entry = {"chunk": "c(r, i)", "for": f"i in range({n})"}
    return _spec([entry], [entry], **extra)


def test_a_variable_buffer_keeps_its_chunks_ids_once_not_once_per_place(monkeypatch):
    # Past the bound of chunks a buffer, which the layers above need (the next test), to measure the layout.
    monkeypatch.setattr(instance, "MAX_VARIABLE_CHUNKS", 3000)
    # requires: the load tries R = 2 only, so the test pays one instance.
    spec = parse_spec(_wide(3000, requires="R == 2"), "wide-v.yaml")
    tracemalloc.start()
    try:
        inst = instantiate(spec, 2, 4, 4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # 12,000 places are a few MB; a tuple of the ids before it on every place
    # held 2 ranks x 2 buffers x 3000²/2 ids x 8 B = 72 MB (quadratic).
    assert peak < 24 * 2**20, f"instantiating 3000 chunks a buffer peaked at {peak / 2**20:.0f} MiB"
    key, last = inst.inputs[1][-1]
    assert key == ("c", 1, 2999) and last.var == 5999
    assert last.base == tuple(range(3000, 5999)) and len(last.base) == 2999
    assert inst.inputs[1][0][1].base == () and not inst.inputs[1][0][1].base


def test_a_variable_buffer_of_more_chunks_than_the_bound_is_refused_at_load():
    # Offsets sum the counts before them: the program, its checks and kernel addresses grow as the square of this.
    refused = _spec([{"chunk": "c(r, i)", "for": f"i in range({MAX_VARIABLE_CHUNKS} + r)"}], [{"chunk": "c(r, i)",
                    "for": f"i in range({MAX_VARIABLE_CHUNKS} + r)"}])
    with pytest.raises(SpecError, match=rf"rank 1's input \(R=2\) lists more than {MAX_VARIABLE_CHUNKS} chunks"):
        parse_spec(refused, "wide-v.yaml")
    # A fixed-size spec's chunks have fixed offsets: no such bound.
    assert parse_spec({**_wide(MAX_VARIABLE_CHUNKS + 1, requires="R == 1"), "count": "chunk"}, "wide.yaml")


def test_a_prefix_is_the_tuple_it_stands_for():
    ids = (4, 7, 1, 9)
    p = Prefix(ids, 3)
    assert p == (4, 7, 1) and (4, 7, 1) == p and p != (4, 7) and p != (4, 7, 1, 9)
    assert hash(p) == hash((4, 7, 1)) and p == Prefix((4, 7, 1), 3) and p != Prefix(ids, 2)
    assert list(p) == [4, 7, 1] and len(p) == 3 and 1 in p and 9 not in p and p[-1] == 1
    assert repr(p) == "(4, 7, 1)" and sum(p) == 12 and sorted(p) == [1, 4, 7]
    # A place with a shared prefix equals one read back with a plain tuple (JSON, pickles).
    place = Place(0, 16, 4, p, 9)
    assert place == Place(0, 16, 4, (4, 7, 1), 9) and hash(place) == hash(Place(0, 16, 4, (4, 7, 1), 9))
    assert pickle.loads(pickle.dumps(place)) == place


def _draws() -> list:
    """Three draws and one counts_for_total per built-in, rank count and distribution (seed 7)."""
    out = []
    for name in ("all-gather-v", "reduce-scatter-v", "all-to-all-v"):
        spec = load_builtin(name)
        for ranks in (1, 2, 3, 8):
            inst = instantiate(spec, ranks, 1000, 4)
            for dist in DISTRIBUTIONS:
                rng = np.random.default_rng(7)
                out.append([name, ranks, dist, [list(draw_counts(inst, dist, rng)) for _ in range(3)],
                            list(counts_for_total(inst, 12345, dist, rng))])
    return out


def test_the_builtins_draws_are_those_of_before_for_a_seed():
    # Bench rows are compared across runs: drawing over the ranks that occur
    # (below) must not move the built-ins' counts. Pinned from the code before.
    inst = instantiate(load_builtin("all-to-all-v"), 3, 1000, 4)
    before = {"uniform": (945, 625, 684, 898, 578, 776, 834, 225, 55),
              "skewed": (776, 75, 150, 874, 2, 411, 797, 156, 152),
              "hot": (0, 0, 1000, 0, 0, 1000, 0, 0, 1000),
              "sparse": (0, 625, 0, 0, 578, 776, 834, 225, 55)}
    for dist, counts in before.items():
        assert draw_counts(inst, dist, np.random.default_rng(7)) == counts, dist
    digest = hashlib.sha256(json.dumps(_draws()).encode()).hexdigest()
    assert digest == "218feafb013771b3f14493c930ebf62e70fb6ebd9d54328a608c2b1ff4595531"


def test_a_draw_is_as_large_as_the_counts_not_the_largest_index():
    # c(r * 10**12): a permutation of 0..max index asked for 50 TiB (10**8: 800 MB a draw).
    spec = parse_spec(_spec(["c(r * 1000000000000)"], ["c((r - 1) % R * 1000000000000)"]), "big-v.yaml")
    inst = instantiate(spec, 8, 100, 4)
    rng = np.random.default_rng(1)
    tracemalloc.start()
    try:
        drawn = {dist: draw_counts(inst, dist, rng) for dist in DISTRIBUTIONS}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"drawing 8 counts peaked at {peak} bytes"
    assert all(len(c) == 8 and all(0 <= x <= 100 for x in c) for c in drawn.values())
    assert sorted(drawn["hot"]) == [0] * 7 + [100]


def test_hot_picks_a_rank_that_has_counts():
    # c(2 * r): ranks 0, 2, 4, ...; a pick of 0..max index hit an odd one about
    # half the time, every count was 0 and the "hot" row was spread evenly.
    spec = parse_spec(_spec(["c(2 * r)"], ["c(2 * ((r - 1) % R))"]), "even-v.yaml")
    inst = instantiate(spec, 8, 64, 4)
    rng = np.random.default_rng(0)
    for _ in range(50):
        assert sorted(draw_counts(inst, "hot", rng)) == [0] * 7 + [64]
    shares = counts_for_total(inst, 256, "hot", rng)
    assert sorted(shares) == [0] * 7 + [256]



class _Counted(tuple):
    """A tuple that counts the walks over it."""

    walks = 0

    def __iter__(self):
        _Counted.walks += 1
        return super().__iter__()


def test_a_reference_gathers_the_sources_once_not_once_per_output_chunk():
    # A scan of every input per output chunk made a reference quadratic in
    # chunks (4 s of a 1000-chunk check at 2 ranks).
    spec = parse_spec(_wide(50, requires="R == 2"), "wide-v.yaml")
    built = instantiate(spec, 2, 3, 4)
    inst = replace(built, inputs=_Counted(built.inputs))
    x = [np.arange(150, dtype=np.float32) + 1000 * r for r in range(2)]
    _Counted.walks = 0
    out = inst.reference(x)
    assert _Counted.walks <= 2, f"walked the inputs {_Counted.walks} times for 100 output chunks"
    assert all(np.array_equal(o, v) for o, v in zip(out, x))  # c(r, i) in, c(r, i) out: a copy in place
    assert inst.sources_of(("c", 1, 49)) == [inst.inputs[1][49][1]] and inst.sources_of(("d",)) == []
    inst.sources_of(("c", 1, 49)).clear()  # a caller's list is its own
    assert len(inst.sources_of(("c", 1, 49))) == 1


FRAME = _spec(["c(r)"], ["c((r - 1) % R)"])


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        # bench crashed at max(1, *counts) with no counts (TypeError)
        (_spec([], []), "count: 'variable' needs at least one chunk in input or output; with 1 rank there is none"),
        (_spec(["c(r - 100)"], ["c((r - 1) % R - 100)"]), "chunk indices must be >= 0"),
        (_spec(["c(r, r - 1)"], ["c((r - 1) % R, r - 2)"], requires="R >= 2"), "c(0, -1) is listed"),
        # ExprError (no PurlinError): a traceback
        ({**FRAME, "bench": {"size": "total / (R - R)"}}, "bench.size: division by zero in 'total / (R - R)'"),
        ({**FRAME, "bench": {"busbw": "1 / (R - 1)"}}, "bench.busbw: division by zero in '1 / (R - 1)' with R=1"),
        # OverflowError in bytes_for_total
        ({**FRAME, "bench": {"size": "total * 1e308 * 10"}}, "got inf with total=1"),
        ({**FRAME, "bench": {"size": "total * 1" + "0" * 320}}, "... (321 digits) with total=1"),
        # rows of -4 B and 0 B, NaN bandwidth, and tune refusing only at the plan
        ({**FRAME, "bench": {"size": "-total"}}, "'-total' must be a finite number > 0 of elements, got -1 with"),
        ({**FRAME, "bench": {"size": 0}}, "'0' must be a finite number > 0 of elements, got 0"),
        ({**FRAME, "bench": {"size": "count"}}, "got 0 with count=0 (count reads 0 in a variable collective's size"),
        ({**FRAME, "bench": {"busbw": -1}}, "bench.busbw: '-1' must be a finite number >= 0, got -1.0 with R=1"),
        ({**FRAME, "bench": {"busbw": "1e308*10 - 1e308*10"}}, "got nan with R=1"),
        ({**FRAME, "bench": {"size": "total / (R - 3)"}}, "got -0.5 with total=1, R=1"),
    ],
)
def test_a_spec_bench_or_tune_would_crash_on_is_refused_at_load_in_one_line(raw, message):
    with pytest.raises(SpecError) as info:
        parse_spec(raw, "my-v.yaml")
    text = str(info.value)
    assert text.startswith("my-v.yaml: ") and "\n" not in text and message in text, text


def test_fixed_specs_bench_conventions_are_checked_too():
    fixed = {"name": "my", "op": "copy", "count": "chunk", "input": ["c(r)"],
             "output": [{"chunk": "c(i)", "for": "i in range(R)"}]}
    for bench, message in [({"size": "count / 2"}, "must be a whole number, got 0.5 with count=1"),
                           ({"size": "count // 2"}, "got 0 with count=1"),
                           ({"size": "count * R", "busbw": "0 - 1"}, "bench.busbw: '0 - 1' must be a finite number")]:
        with pytest.raises(SpecError, match=re.escape(message)):
            parse_spec({**fixed, "bench": bench}, "my.yaml")
    spec = parse_spec({**fixed, "bench": {"size": "count * R", "busbw": "(R - 1) / R"}}, "my.yaml")
    assert spec.bytes_for_count(4, 3, 2) == 24 and spec.busbw_at(1) == 0.0  # 0 at one rank is nccl-tests'


def test_past_the_ranks_tried_at_load_sizing_still_fails_in_one_line():
    # Fine at R = 1..8 (what a load tries), undefined at R = 9: bench sizes a
    # row there with a SpecError, not an ExprError or OverflowError traceback.
    bench = {"size": "total * (2 + 1 / (R - 9))", "busbw": "1 + 1 / (R - 9)"}
    spec = parse_spec({**FRAME, "bench": bench}, "my-v.yaml")
    assert spec.total_for_bytes(8, 1024, 4) == 256 and spec.busbw_at(8) == 0.0
    for call in (lambda: spec.total_for_bytes(9, 1024, 4), lambda: spec.bytes_for_total(9, 10, 4),
                 lambda: instantiate(spec, 9, 4, 4).busbw_factor()):
        with pytest.raises(SpecError, match=r"^my-v.yaml: bench\.(size|busbw): division by zero"):
            call()


def test_the_builtins_and_examples_bench_conventions_still_load():
    for spec in load_all_builtin() + [load_spec_file(p) for p in sorted(Path("examples").glob("*.yaml"))]:
        assert spec.size_at(8, 1) > 0 and spec.busbw_at(8) >= 0, spec.name


def test_a_size_that_makes_a_row_an_absurd_total_is_one_line():
    # total / 10**30 is finite and > 0, but 1 KiB is then a call of 2.6e32
    # elements: counts_for_total overflowed int64 (a traceback).
    spec = parse_spec({**FRAME, "bench": {"size": "total / 1" + "0" * 30}}, "my-v.yaml")
    with pytest.raises(SpecError, match=r"^my-v\.yaml: bench\.size: .* makes 1024 B a call of 2\.56e\+32 elements"):
        spec.total_for_bytes(8, 1024, 4)
    assert parse_spec(FRAME, "my-v.yaml").total_for_bytes(8, 1 << 40, 4) == 1 << 38  # 1 TiB is a total, not an error


@pytest.mark.parametrize("name", ["all-gather", "all-gather-v", "reduce-scatter"])
def test_a_count_whose_buffer_passes_the_largest_size_is_refused_before_any_place(name):
    spec = load_builtin(name)
    huge = (1 << 60) // 4  # float32 elements in 2**60 bytes: one rank's chunk fills the largest size
    with pytest.raises(SpecError, match=r"above the largest size"):
        instantiate(spec, 4, huge, 4)
    assert instantiate(spec, 4, huge // 8, 4).ranks == 4  # a buffer of 4 chunks at 2**57 bytes each holds
