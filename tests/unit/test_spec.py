"""The semantics layer: built-in specs, count -> chunk mapping, reference
semantics (property-style over ranks, counts, roots and dtypes), and every way
a spec can be wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from purlin_bench.base.dtypes import DTYPES
from purlin_bench.base.errors import SpecError
from purlin_bench.spec import instantiate, load_builtin, load_spec_file, resolve
from purlin_bench.spec.loader import builtin_spec_paths

BUILTINS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce", "gather", "scatter")
# Sizes per call (count: variable): tests/unit/test_variable_spec.py.
VARIABLE = ("all-gather-v", "reduce-scatter-v", "all-to-all-v")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_eleven_builtins_are_there():
    assert sorted(builtin_spec_paths()) == sorted(BUILTINS + VARIABLE)


@pytest.mark.parametrize("name", BUILTINS)
def test_each_builtin_loads(name):
    spec = load_builtin(name)
    assert spec.name == name
    assert spec.op in ("copy", "reduce")
    assert (spec.redop == "sum") == (spec.op == "reduce")
    assert spec.rooted == (name in ("broadcast", "reduce", "gather", "scatter"))
    assert spec.description


# -- property tests -----------------------------------------------------------


@st.composite
def setups(draw, names=BUILTINS):
    name = draw(st.sampled_from(names))
    ranks = draw(st.integers(1, 9))
    root = draw(st.integers(0, ranks - 1))
    count = draw(st.integers(0, 5000))
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    return load_builtin(name), ranks, root, count, dtype


def _inst(setup):
    spec, ranks, root, count, dtype = setup
    return instantiate(spec, ranks, count, DTYPES[dtype].itemsize, root)


@given(setups())
def test_chunk_sizes_sum_to_the_count(setup):
    spec, ranks, root, count, dtype = setup
    inst = _inst(setup)
    itemsize = DTYPES[dtype].itemsize
    unit = max(1, 16 // itemsize)
    if spec.count_mode == "chunk":
        assert set(inst.chunk_counts.values()) <= {count}
    else:
        # count: buffer -- the buffer listing every chunk once holds exactly count,
        # split in 16-byte units, full chunks first, the last taking the rest.
        sizes = [inst.chunk_counts[k] for k, _ in max(inst.inputs, key=len)]
        assert sum(sizes) == count
        full = [s for s in sizes if s]
        assert all(s % unit == 0 for s in full[:-1])
        assert sizes == sorted(sizes, reverse=True)
    for layout, n in zip(inst.inputs, inst.in_counts):
        assert sum(p.count for _, p in layout) == n
        offsets = [p.offset for _, p in layout]
        assert offsets == sorted(offsets)


@given(setups(names=("all-reduce", "broadcast", "reduce")))
def test_buffer_chunks_start_on_16_byte_boundaries(setup):
    inst = _inst(setup)
    itemsize = inst.itemsize
    for layout in inst.inputs + inst.outputs:
        for _, place in layout:
            if place.count:  # an empty chunk has no data to align
                assert (place.offset * itemsize) % 16 == 0


def _random(inst, rng):
    # Small integers keep float sums exact, so the reference can be compared bit for bit.
    return [rng.integers(-50, 50, size=n).astype(np.float64) for n in inst.in_counts]


@given(setups(), st.integers(0, 2**32 - 1))
def test_reference_semantics(setup, seed):
    spec, ranks, root, count, _ = setup
    inst = _inst(setup)
    x = _random(inst, np.random.default_rng(seed))
    out = inst.reference(x)
    R, name = ranks, spec.name
    whole = [np.asarray(v) for v in x]
    if name == "all-reduce":
        for r in range(R):
            assert np.array_equal(out[r], np.sum(whole, axis=0))
    elif name == "all-gather":
        for r in range(R):
            assert np.array_equal(out[r], np.concatenate(whole))
    elif name == "reduce-scatter":
        total = np.sum(whole, axis=0)
        for r in range(R):
            assert np.array_equal(out[r], total[r * count : (r + 1) * count])
    elif name == "all-to-all":
        for r in range(R):
            for j in range(R):
                assert np.array_equal(out[r][j * count : (j + 1) * count], x[j][r * count : (r + 1) * count])
    elif name == "broadcast":
        assert [len(v) for v in x] == [count if r == root else 0 for r in range(R)]
        for r in range(R):
            assert np.array_equal(out[r], x[root])
    elif name == "reduce":
        assert [len(v) for v in out] == [count if r == root else 0 for r in range(R)]
        assert np.array_equal(out[root], np.sum(whole, axis=0))
    elif name == "gather":
        assert [len(v) for v in out] == [count * R if r == root else 0 for r in range(R)]
        assert np.array_equal(out[root], np.concatenate(whole))
    elif name == "scatter":
        assert [len(v) for v in x] == [count * R if r == root else 0 for r in range(R)]
        for r in range(R):
            assert np.array_equal(out[r], x[root][r * count : (r + 1) * count])


@given(setups(names=("all-reduce", "reduce", "reduce-scatter")), st.sampled_from(["max", "min", "prod"]))
def test_reference_reductions_other_than_sum(setup, redop):
    inst = _inst(setup)
    x = [np.random.default_rng(1).integers(-3, 4, size=n).astype(np.float64) for n in inst.in_counts]
    out = inst.reference(x, redop)
    fn = {"max": np.maximum.reduce, "min": np.minimum.reduce, "prod": np.multiply.reduce}[redop]
    for rank, layout in enumerate(inst.outputs):
        for key, place in layout:
            parts = [x[s.rank][s.offset : s.offset + s.count] for s in inst.sources_of(key)]
            assert np.array_equal(out[rank][place.offset : place.offset + place.count], fn(parts))


def test_reference_accumulates_in_float64_and_casts_once():
    # 2049 + 1 + 1 in float32 step by step stays 2050 at float16; float64 then one cast gives 2052.
    inst = instantiate(load_builtin("all-reduce"), 3, 1, 2)
    x = [np.array([v], dtype=np.float16) for v in (2048.0, 2.0, 2.0)]
    assert inst.reference(x)[0][0] == np.float16(2052.0)
    assert inst.reference(x)[0].dtype == np.float16


@pytest.mark.parametrize("name", ["all-reduce", "broadcast", "reduce"])
def test_1001_elements_over_7_ranks(name):
    inst = instantiate(load_builtin(name), 7, 1001, 4, root=3)
    assert max(inst.in_counts) == 1001 and max(inst.out_counts) == 1001
    if name == "all-reduce":
        # float32: 4 elements per 16 bytes; ceil(1001 / 7) = 143 -> 144, the last takes 137.
        assert [inst.chunk_counts[("c", i)] for i in range(7)] == [144] * 6 + [137]


def test_buffer_count_smaller_than_the_ranks_leaves_trailing_chunks_empty():
    inst = instantiate(load_builtin("all-reduce"), 8, 5, 4)
    assert [inst.chunk_counts[("c", i)] for i in range(8)] == [4, 1, 0, 0, 0, 0, 0, 0]
    x = [np.full(5, r + 1.0) for r in range(8)]
    assert all(np.array_equal(o, np.full(5, 36.0)) for o in inst.reference(x))


@pytest.mark.parametrize(
    ("name", "ranks", "offsets"),
    [("all-gather", 4, (0, 3, 6, 9)), ("reduce-scatter", 4, (0, 3, 6, 9)), ("all-reduce", 4, (0, 0, 0, 0))],
)
def test_inplace_offsets_follow_nccl_tests(name, ranks, offsets):
    assert instantiate(load_builtin(name), ranks, 3, 4).inplace_offsets() == offsets


def test_all_to_all_cannot_run_in_place():
    with pytest.raises(SpecError, match="cannot run in place"):
        instantiate(load_builtin("all-to-all"), 3, 4, 4).inplace_offsets()


@pytest.mark.parametrize(
    ("ranks", "count", "root", "fragment"),
    [(0, 4, 0, "ranks must be a positive"), (2, -1, 0, "count must be"), (2, 4, 2, "root 2 is out of range")],
)
def test_instantiate_rejects_bad_arguments(ranks, count, root, fragment):
    with pytest.raises(SpecError, match=fragment):
        instantiate(load_builtin("reduce"), ranks, count, 4, root)


def test_bytes_and_count_conversions():
    spec = load_builtin("all-gather")
    assert spec.bytes_for_count(8, 1000, 4) == 32000
    assert spec.count_for_bytes(8, 32000, 4) == 1000
    assert spec.count_for_bytes(8, 1, 4) == 1  # never 0


def test_example_ring_shift_loads_and_means_what_it_says():
    spec = resolve(str(EXAMPLES / "ring-shift.yaml"))
    inst = instantiate(spec, 5, 3, 4)
    x = [np.full(3, float(r)) for r in range(5)]
    assert [o[0] for o in inst.reference(x)] == [4.0, 0.0, 1.0, 2.0, 3.0]


# -- bad specs --------------------------------------------------------------

GOOD = """\
name: t
op: reduce
input:
  - chunk: c(i)
    for: i in range(R)
output:
  - chunk: c(i)
    for: i in range(R)
"""

BAD = {
    "malformed YAML": ("name: t\nop: [copy\n", "malformed YAML at line"),
    "not a mapping": ("- 1\n- 2\n", "top level: a spec is a mapping"),
    "missing field": ("name: t\nop: copy\ninput: [c]\n", ": output: missing"),
    "unknown top-level key": (GOOD + "colour: red\n", "top level: unknown key(s) ['colour']"),
    "unknown entry key": (
        "name: t\nop: copy\ninput:\n  - chunk: c\n    where: r == 0\noutput: [c]\n",
        "input[0]: unknown key(s) ['where']",
    ),
    "bad op": ("name: t\nop: move\ninput: [c]\noutput: [c]\n", ": op: expected one of copy, reduce"),
    "bad reduction": (GOOD + "reduce: avg\n", ": reduce: expected one of sum, prod, max, min"),
    "reduction on a copy": (
        "name: t\nop: copy\nreduce: sum\ninput: [c]\noutput: [c]\n",
        ": reduce: only a reduce collective",
    ),
    "bad count mode": (GOOD + "count: bytes\n", ": count: expected one of buffer, chunk"),
    "bad name": ("name: 'a b'\nop: copy\ninput: [c]\noutput: [c]\n", ": name: expected a name"),
    "bad template syntax": (
        "name: t\nop: copy\ninput:\n  - chunk: c(r +)\noutput:\n  - chunk: c(r)\n",
        "input[0].chunk: cannot parse 'r +'",
    ),
    "bad chunk template": (
        "name: t\nop: copy\ninput:\n  - chunk: 3c\noutput: [c]\n",
        "input[0].chunk: expected NAME or NAME(index, ...)",
    ),
    "bad loop": (
        "name: t\nop: copy\ninput:\n  - chunk: c(i)\n    for: i from 0 to R\noutput: [c]\n",
        "input[0].for[0]: expected 'VAR in range(STOP)'",
    ),
    "loop shadows a name": (
        "name: t\nop: copy\ninput:\n  - chunk: c(r)\n    for: r in range(R)\noutput: [c]\n",
        "input[0].for[0]: loop variable 'r' shadows",
    ),
    "unknown name in template": (
        "name: t\nop: copy\ninput:\n  - chunk: c(k)\noutput:\n  - chunk: c(r)\n",
        "input[0].chunk: unknown name 'k'",
    ),
    "unknown name in when": (
        "name: t\nop: copy\ninput:\n  - chunk: c\n    when: r == leader\noutput: [c]\n",
        "input[0].when: unknown name 'leader'",
    ),
    "attribute access": (
        "name: t\nop: copy\ninput:\n  - chunk: c(r.real)\noutput:\n  - chunk: c(r)\n",
        "input[0].chunk: 'r.real' is not allowed",
    ),
    "division by zero in an index": (
        "name: t\nop: copy\ninput:\n  - chunk: c(r)\noutput:\n  - chunk: c(r // (R - R))\n",
        "output[0]: division by zero in 'r // (R - R)'",
    ),
    "output chunk with no source": (
        "name: t\nop: copy\ninput:\n  - chunk: c(r)\noutput:\n  - chunk: c(r + 1)\n",
        ": output: chunk c(1) of rank 0 has no source",
    ),
    "copy with two sources": (
        "name: t\nop: copy\ninput:\n  - chunk: c\noutput:\n  - chunk: c\n",
        ": input: copy chunk c has 2 sources",
    ),
    "bad requires": (GOOD + "requires: R %% 0 == 0\n".replace("%%", "%"), ": requires: division by zero"),
    "bad bench size": (GOOD + "bench: {size: count * r}\n", "bench.size: unknown name 'r'"),
    "bench with unknown key": (GOOD + "bench: {size: count, speed: 1}\n", ": bench: expected a mapping"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_spec_names_file_and_field(case, tmp_path):
    text, fragment = BAD[case]
    path = tmp_path / "user-spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert fragment in message, message
    assert "\n" not in message


def test_good_template_of_the_bad_cases_loads(tmp_path):
    # Guards the table above: its failures come from the edits, not from GOOD.
    path = tmp_path / "good.yaml"
    path.write_text(
        GOOD
        + textwrap.dedent("""\
        requires: R >= 1
        bench: {size: count, busbw: "2 * (R - 1) / R"}
    """)
    )
    assert load_spec_file(path).op == "reduce"


def test_unreadable_and_unknown():
    with pytest.raises(SpecError, match="cannot read"):
        load_spec_file("/nonexistent/spec.yaml")
    with pytest.raises(SpecError, match="unknown collective 'all-mix' \\(known: "):
        resolve("all-mix")


def test_requires_restricts_rank_counts(tmp_path):
    path = tmp_path / "even.yaml"
    path.write_text(GOOD + "requires: R % 2 == 0\n")
    spec = load_spec_file(path)
    assert spec.supports_ranks(4) and not spec.supports_ranks(3)
    with pytest.raises(SpecError, match=r"does not support 3 ranks \(requires R % 2 == 0\)"):
        instantiate(spec, 3, 8, 4)


@pytest.mark.parametrize("path", [None, "examples/ring-shift.yaml"])
def test_an_instance_pickles_to_the_same_semantics(path):
    """Rank 0 of a run sends instances to the other ranks (the NCCL
    baseline's command): a spec's expressions travel as their text."""
    import pickle

    specs = (
        [load_builtin(n) for n in BUILTINS]
        if path is None
        else [resolve(str(Path(__file__).resolve().parents[2] / path))]
    )
    for spec in specs:
        inst = instantiate(spec, 4, 33, 4, root=1) if spec.rooted else instantiate(spec, 4, 33, 4)
        back = pickle.loads(pickle.dumps(inst))
        inputs = [np.arange(c, dtype=np.float32) + 100 * r for r, c in enumerate(inst.in_counts)]
        assert back.in_counts == inst.in_counts and back.out_counts == inst.out_counts and back.root == inst.root
        expected = inst.reference(inputs, spec.redop)
        assert all(np.array_equal(a, b) for a, b in zip(back.reference(inputs, spec.redop), expected)), spec.name


def test_a_file_that_is_no_spec_is_named_not_echoed_into_the_error(tmp_path):
    # Every line of a password file became an "unknown key" printed whole (audit 26, F11).
    path = tmp_path / "shadow"
    path.write_text("".join(f"user{i}:$6$secretsecretsecret{i}:19000:0:99999:7:::\n" for i in range(5)))
    with pytest.raises(SpecError) as err:
        load_spec_file(path)
    message = str(err.value)
    assert "unknown key(s) [" in message and "and 2 more" in message and "19000:0:99999" not in message
    assert sum(f"user{i}" in message for i in range(5)) == 3
