"""The orchestration layer: structural properties of derived programs, the
genericity of strategies, parameters, refusals and (de)serialisation."""

from __future__ import annotations

import ast
import io
import json
import tokenize
from pathlib import Path

import pytest
import yaml

from purlin_bench.base.errors import ProgramError
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import SCHEMA_VERSION, Consume, Notify, Program, Ref, Stage
from purlin_bench.program.validate import validate
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.spec.loader import OPS, builtin_spec_paths, parse_spec
from purlin_bench.strategies import STRATEGIES

STRATEGY_DIR = Path(__file__).resolve().parents[2] / "purlin_bench" / "strategies"


def _program(name, strategy, ranks=8, count=8192, root=0, inplace=False, **params):
    inst = instantiate(load_builtin(name), ranks, count, 4, root)
    return inst, derive_program(inst, strategy, "float32", params=params, inplace=inplace)


def _data_refs(program: Program, rank: int):
    """(reads, writes) of every data step of ``rank``."""
    reads, writes = [], []
    for steps in program.lists[rank]:
        for step in steps:
            if isinstance(step, Stage):
                reads.append(step.src)
                writes.extend(step.dsts)
            elif isinstance(step, Consume):
                reads.extend(step.srcs)
                writes.extend(step.dsts)
    return reads, writes


# -- structure of each strategy ------------------------------------------------


def test_direct_all_reduce_pulls_from_every_rank_without_scratch():
    _, p = _program("all-reduce", "direct")
    assert p.scratch_count == 0
    for rank in range(8):
        reads, writes = _data_refs(p, rank)
        assert {r.rank for r in reads if r.buf == "in"} == set(range(8))
        assert {w.rank for w in writes} == {rank}  # pull: writes only its own output
        reduces = [s for ch in p.lists[rank] for s in ch if isinstance(s, Consume) and s.op == "reduce"]
        assert reduces and all(len(s.srcs) == 8 for s in reduces)


def test_push_all_gather_writes_to_seven_peers_per_rank():
    _, p = _program("all-gather", "push")
    for rank in range(8):
        stages = [s for ch in p.lists[rank] for s in ch if isinstance(s, Stage) and s.dsts]
        peers = {d.rank for s in stages for d in s.dsts} - {rank}
        assert peers == set(range(8)) - {rank}
        assert all(s.src.rank == rank and s.src.buf == "in" for s in stages)
        # push: a copy is written straight into outputs, no scratch, no remote reads
        reads, _ = _data_refs(p, rank)
        assert all(r.rank == rank for r in reads)
    assert p.scratch_count == 0


def test_two_shot_all_reduce_reduces_an_eighth_and_writes_all_outputs():
    count = 8192
    _, p = _program("all-reduce", "two-shot", count=count)
    for rank in range(8):
        reduces = [s for ch in p.lists[rank] for s in ch if isinstance(s, Consume) and s.op == "reduce"]
        reduced = sum(s.dsts[0].count for s in reduces)
        assert reduced == count // 8
        assert all(len(s.srcs) == 8 for s in reduces)
        assert {d.rank for s in reduces for d in s.dsts} == set(range(8))
        assert all(d.buf == "out" for s in reduces for d in s.dsts)
    assert p.scratch_count == 0


def test_two_shot_uneven_count_still_reads_each_input_once():
    count = 1001
    _, p = _program("all-reduce", "two-shot", ranks=7, count=count)
    per_rank = []
    for rank in range(7):
        reduces = [s for ch in p.lists[rank] for s in ch if isinstance(s, Consume) and s.op == "reduce"]
        per_rank.append(sum(s.srcs[0].count for s in reduces))
    assert sum(per_rank) == count
    assert max(per_rank) - min(per_rank) <= 4 * 7  # parts of whole 16-byte units


RING_CASES = [(s.name, r) for s in load_all_builtin() for r in (2, 3, 5, 8)]


@pytest.mark.parametrize(("name", "ranks"), RING_CASES)
def test_ring_writes_only_to_the_next_rank_and_reads_only_itself(name, ranks):
    spec = load_builtin(name)
    for root in range(ranks) if spec.rooted else (0,):
        inst = instantiate(spec, ranks, 1000, 4, root)
        p = derive_program(inst, "ring", "float32")
        for rank in range(ranks):
            reads, writes = _data_refs(p, rank)
            assert {r.rank for r in reads} <= {rank}, f"rank {rank} reads remote memory"
            assert {w.rank for w in writes} - {rank} <= {(rank + 1) % ranks}, f"rank {rank} writes beyond its neighbour"
            notified = {s.flag.rank for ch in p.lists[rank] for s in ch if isinstance(s, Notify) and s.role == "data"}
            assert notified <= {(rank + 1) % ranks}


def test_ring_all_reduce_pipelines_by_slice_bytes():
    _, coarse = _program("all-reduce", "ring", count=8192)
    _, fine = _program("all-reduce", "ring", count=8192, slice_bytes=1024)
    assert fine.step_count() > coarse.step_count()
    sizes = {d.count for _, s in fine.steps() if isinstance(s, Consume) for d in s.dsts}
    assert max(sizes) <= 256  # 1 KiB of float32


def test_channels_give_that_many_lists_per_rank():
    _, p = _program("all-gather", "direct", channels=3, slice_bytes=512)
    assert p.channels == 3
    for rank in range(8):
        assert len(p.lists[rank]) == 3
        assert all(p.lists[rank][c] for c in range(3))


def test_slices_are_aligned_to_16_bytes():
    _, p = _program("all-reduce", "direct", ranks=3, count=1001, slice_bytes=100)
    for _, step in p.steps():
        if isinstance(step, Consume) and step.op != "wait":
            for ref in (*step.srcs, *step.dsts):
                assert ref.offset % 4 == 0  # float32: 4 elements per 16 bytes


def test_inplace_reroutes_through_scratch_only_when_needed():
    # direct pulls inputs that peers overwrite in place: rerouted via scratch.
    _, direct = _program("all-reduce", "direct", inplace=True)
    assert direct.scratch_count >= 8192
    # two-shot reads every element once before anyone writes it: no detour.
    _, two_shot = _program("all-reduce", "two-shot", inplace=True)
    assert two_shot.scratch_count == 0
    assert two_shot.inplace_offsets == (0,) * 8


def test_every_program_validates_against_its_dataflow():
    for spec in load_all_builtin():
        for ranks in (1, 4):
            inst = instantiate(spec, ranks, 37, 4, ranks - 1 if spec.rooted else 0)
            for strategy in STRATEGIES:
                assert validate(derive_program(inst, strategy, "float32"), inst)


# -- generic over specs -------------------------------------------------------


def _code_tokens(path: Path) -> list[str]:
    """Identifiers and string literals of a module, without comments and docstrings."""
    source = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                docstrings.add(body[0].value.lineno)
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME or (tok.type == tokenize.STRING and tok.start[0] not in docstrings):
            out.append(tok.string.lower().replace("_", "-"))
    return out


def test_no_strategy_code_names_a_collective():
    names = [n for n in builtin_spec_paths() if n not in OPS]  # 'reduce' is also the op's name
    assert "all-reduce" in names and len(names) == 10  # the eight and the three -v, less "reduce"
    files = sorted(STRATEGY_DIR.glob("*.py"))  # derive.py and default.py too
    assert len(files) >= 8
    for path in files:
        for token in _code_tokens(path):
            for name in names:
                assert name not in token and name.replace("-", "") not in token, (
                    f"{path.name} mentions '{name}' in code: {token}"
                )
        # And no code compares a spec's name with anything.
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    assert not (isinstance(side, ast.Attribute) and side.attr == "name"), (
                        f"{path.name}:{node.lineno} compares a name"
                    )


@pytest.mark.parametrize("name", ["all-reduce", "all-gather", "scatter", "all-to-all"])
def test_a_renamed_spec_gets_the_same_programs(name):
    raw = yaml.safe_load(builtin_spec_paths()[name].read_text())
    raw["name"] = "zz-renamed"
    renamed = parse_spec(raw, "renamed.yaml")
    for ranks in (3, 8):
        a = instantiate(load_builtin(name), ranks, 100, 4, 1)
        b = instantiate(renamed, ranks, 100, 4, 1)
        for strategy in STRATEGIES:
            pa, pb = derive_program(a, strategy, "float32"), derive_program(b, strategy, "float32")
            assert pb.collective == "zz-renamed"
            assert pa.lists == pb.lists and pa.flag_counts == pb.flag_counts and pa.scratch_count == pb.scratch_count


# -- refusals and parameters --------------------------------------------------


def test_two_shot_broadcast_reads_the_root_once_and_spreads_the_work():
    count = 8192
    inst, p = _program("broadcast", "two-shot", root=3, count=count)
    data = [(r, step) for r in range(8) for step in p.lists[r][0] if isinstance(step, Consume) and step.op != "wait"]
    # every rank copies one eighth of the root's input into all eight outputs
    assert sorted(r for r, _ in data) == list(range(8))
    assert all(step.op == "copy" and len(step.srcs) == 1 and step.srcs[0].rank == 3 for _, step in data)
    assert all(sorted(d.rank for d in step.dsts) == list(range(8)) for _, step in data)
    assert sum(step.srcs[0].count for _, step in data) == count
    assert {step.srcs[0].count for _, step in data} == {count // 8}


@pytest.mark.parametrize("name", ["reduce-scatter", "all-gather", "broadcast", "all-to-all"])
def test_every_strategy_applies_to_every_builtin(name):
    inst = instantiate(load_builtin(name), 4, 16, 4)
    for strategy in STRATEGIES:
        assert derive_program(inst, strategy, "float32").ranks == 4


def test_unknown_strategy():
    inst = instantiate(load_builtin("all-reduce"), 2, 16, 4)
    known = r"\(known: direct, push, push-parity, two-shot, ring\)"
    with pytest.raises(ProgramError, match=r"unknown strategy 'tree' " + known):
        derive_program(inst, "tree", "float32")


def test_unknown_parameter():
    inst = instantiate(load_builtin("all-reduce"), 2, 16, 4)
    with pytest.raises(ProgramError, match=r"unknown parameter\(s\) \['unroll'\] for strategy 'ring'"):
        derive_program(inst, "ring", "float32", params={"unroll": 2})


@pytest.mark.parametrize(
    ("param", "value"),
    [("channels", 0), ("channels", "2"), ("channels", True), ("slice_bytes", -1), ("slice_bytes", 1.5)],
)
def test_bad_parameter_value(param, value):
    inst = instantiate(load_builtin("all-reduce"), 2, 16, 4)
    # channels is bounded on both sides (strategies.base.MAX_CHANNELS), so its range is said
    with pytest.raises(
        ProgramError, match=f"parameter {param} of strategy 'direct' must be (a whole number|in \\[1, 64\\])"
    ):
        derive_program(inst, "direct", "float32", params={param: value})


# -- serialisation -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "strategy", "inplace"),
    [
        ("all-reduce", "ring", False),
        ("all-reduce", "direct", True),
        ("reduce", "push", False),
        ("all-gather", "ring", True),
        ("scatter", "direct", False),
    ],
)
def test_json_round_trip(name, strategy, inplace):
    _, p = _program(name, strategy, ranks=5, count=300, root=2, inplace=inplace)
    assert Program.from_dict(p.to_dict()) == p
    again = Program.from_dict(json.loads(p.to_json()))
    assert again == p
    assert again.to_json() == p.to_json()


def test_newer_schema_is_rejected():
    _, p = _program("all-reduce", "direct", ranks=2, count=8)
    data = p.to_dict()
    data["schema"] = SCHEMA_VERSION + 1
    with pytest.raises(ProgramError, match="newer than this purlin-bench understands"):
        Program.from_dict(data)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda d: d.pop("lists"), "KeyError"),
        (lambda d: d["lists"][0][0].append({"kind": "teleport"}), "unknown step kind"),
        (lambda d: d["lists"][0][0][0].update(src=[0, "vram", 0, 8]), "unknown buffer"),
        (lambda d: d["lists"][0][0].append({"kind": "notify", "flag": [0, 0], "role": "maybe"}), "unknown notify role"),
    ],
)
def test_malformed_program_data_is_rejected(edit, fragment):
    _, p = _program("all-reduce", "direct", ranks=2, count=8)
    data = json.loads(p.to_json())
    edit(data)
    with pytest.raises(ProgramError, match=f"not a valid program: .*{fragment}"):
        Program.from_dict(data)


def test_refs_in_programs_stay_inside_buffers():
    _, p = _program("gather", "ring", ranks=6, count=77, root=4)
    for _, step in p.steps():
        refs: list[Ref] = []
        if isinstance(step, Stage):
            refs = [step.src, *step.dsts]
        elif isinstance(step, Consume):
            refs = [*step.srcs, *step.dsts]
        for ref in refs:
            assert 0 <= ref.offset and ref.offset + ref.count <= p.buffer_count(ref.rank, ref.buf)


def test_channels_take_whole_flows_before_slicing_them():
    """all-to-all push with 8 channels: each of a rank's 8 flows is one op on
    its own channel (not 8 slices of every flow round-robin: 8 ops a channel)."""
    _, p = _program("all-to-all", "push", count=1024, channels=8)
    for rank in range(8):
        stages = [[s for s in chan if isinstance(s, Stage) and s.dsts] for chan in p.lists[rank]]
        assert [len(s) for s in stages] == [1] * 8
        assert sorted(s[0].dsts[0].rank for s in stages) == list(range(8))
    # a rank with one flow still slices it over the channels
    _, g = _program("all-gather", "push", count=1024, channels=4)
    assert [len([s for s in chan if isinstance(s, Stage) and s.dsts]) for chan in g.lists[0]] == [1] * 4


def test_programs_beyond_the_step_limit_are_refused(monkeypatch):
    import purlin_bench.strategies.derive as derive

    inst = instantiate(load_builtin("all-reduce"), 8, 4096, 4)
    program = derive_program(inst, "push", "float32", params={"slice_bytes": 1024})
    data_steps = sum(
        1 for r in program.lists for c in r for s in c if not (isinstance(s, Notify) and s.role in ("ready", "done"))
    )
    monkeypatch.setattr(derive, "MAX_STEPS", 100)
    derive._CACHE.clear()
    with pytest.raises(
        ProgramError,
        match=r"push would take \d+ steps for all-reduce of 4096 elements \(at most 100\); use larger slices",
    ):
        derive_program(inst, "push", "float32", params={"slice_bytes": 1024})
    assert data_steps > 100
    assert derive_program(inst, "two-shot", "float32").strategy == "two-shot"


def test_validation_time_grows_linearly_with_program_size():
    """A 62k-step program (push, 256 KiB slices of 128 MiB) validates in about
    a second; the quadratic interval map this guards against took ~20 s."""
    import time

    from purlin_bench.strategies.derive import _build

    inst = instantiate(load_builtin("all-reduce"), 8, 64 << 20, 2)
    program = _build(
        inst, "push", {"channels": 4, "slice_bytes": 256 << 10}, "bfloat16", "sum", inplace=False, reroute=False
    )
    assert sum(len(s) for r in program.lists for s in r) > 60_000
    start = time.perf_counter()
    validate(program, inst)
    assert time.perf_counter() - start < 10.0
