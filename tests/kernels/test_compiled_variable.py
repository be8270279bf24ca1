"""The compiled datapath for sizes per call (codegen/variable.py), without a
GPU: the generated code's count and slice expressions, read back and
evaluated for a call's counts, must give the slices the program resolves
(program/variable.resolve) for every op; nvcc builds it without spills."""

from __future__ import annotations

import re

import numpy as np
import pytest

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, build_weight, options_of
from purlin_bench.backends.cupy.codegen.lower import OP_NONE, flag_id, lower
from purlin_bench.backends.cupy.codegen.variable import SHARED
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.spec.variable import DISTRIBUTIONS, draw_counts
from purlin_bench.strategies import STRATEGIES
from purlin_bench.strategies.derive import derive_program
from tests.nvcc_build import assert_builds_without_spills
from tests.unit.test_lower_variable import VARIABLE, expected_view

_MOVE = re.compile(
    r"char\* const src\[\d+\] = \{(?P<src>[^}]*)\}; char\* const dst\[\d+\] = \{(?P<dst>[^}]*)\};"
    r" var_move\(OP_\w+, (?P<count>.*), src, dst, tid, stride\); \}"
)
_LOAD = re.compile(r"const i64 c(\d+) = clamp_count\(__ldg\(counts \+ \1\), (\d+)ll\);")


class _Base:
    """A slice base in an evaluated address: ``b3 + x`` is (3, x)."""

    def __init__(self, index: int):
        self.index = index

    def __add__(self, offset: int) -> tuple[int, int]:
        return self.index, offset


def _python(expr: str) -> str:
    expr = re.sub(r"(\d+)ll\b", r"\1", expr).replace("(i64)sizeof(S)", "1").replace("(i64)", "")
    return expr.replace(f"{SHARED}[", "c[")


def generated_view(source: str, counts: list[int]):
    """Per moving op, in source order: (count, [(base, offset) ...] sources, destinations) as the code computes them."""
    body = source.split('extern "C" __global__', 1)[1]
    loads = {int(i): int(cap) for i, cap in _LOAD.findall(body)}
    clamped = [max(0, min(n, cap)) for n, cap in zip(counts, caps_in(body, len(counts)))]
    env = {f"b{i}": _Base(i) for i in range(512)} | {f"c{i}": clamped[i] for i in loads} | {"c": clamped}
    env |= {"min": min, "max": max}
    out = []
    for m in _MOVE.finditer(body):
        srcs = [eval(_python(e), env) for e in m["src"].split(", ")]
        dsts = [eval(_python(e), env) for e in m["dst"].split(", ")]
        out.append((eval(_python(m["count"]), env), srcs, dsts))
    return out


def caps_in(body: str, n: int) -> list[int]:
    """Each count's capacity as the code's check of block 0 holds it."""
    found = dict(re.findall(r"__ldg\(counts \+ (\d+)\); if \(n < 0 \|\| n > (\d+)ll\)", body))
    return [int(found[str(i)]) for i in range(n)]


@pytest.mark.parametrize("name", VARIABLE)
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("ranks", (1, 3, 5, 8))
def test_the_generated_code_sizes_every_slice_as_the_program_resolves_it(name, strategy, ranks):
    inst = instantiate(load_builtin(name), ranks, 29, 4)
    rng = np.random.default_rng(ranks)
    for params in ({}, {"slice_bytes": 32, "channels": 2}):
        program = derive_program(inst, strategy, "float32", params=params)
        low = lower(program, list(range(ranks)), True, "sm", flag_id)
        if build_weight(low) > MAX_BUILD_WEIGHT:
            continue  # refused before any code is made (test_compiled_source)
        source = CupyBackend(ranks).source(program, kernel="compiled")
        assert source.count("var_move(") - 1 == int((low.ops["op"] != OP_NONE).sum())  # the prologue defines it
        assert "const i64* __restrict__ counts) {" in source
        wild = [10**9, -5, *[inst.count] * len(inst.count_keys)][: len(inst.count_keys)]
        every = [(0,) * len(inst.count_keys), (inst.count,) * len(inst.count_keys), wild]
        for counts in every + [draw_counts(inst, d, rng) for d in DISTRIBUTIONS]:
            clamped = [max(0, min(int(n), inst.count)) for n in counts]
            got = generated_view(source, list(counts))
            # ops in the source's order are lower's: groups by rank, then channel
            assert got == expected_view(program, clamped), (name, strategy, ranks, params, counts)


def test_a_group_reading_many_counts_keeps_them_in_shared_memory_and_a_small_one_in_registers():
    inst = instantiate(load_builtin("all-to-all-v"), 8, 1001, 4)
    two_shot = CupyBackend(8).source(derive_program(inst, "two-shot", "float32"), kernel="compiled")
    assert f"__shared__ i64 {SHARED}[64];" in two_shot and "__syncthreads();  // the group's counts" in two_shot
    per_flow = CupyBackend(8).source(derive_program(inst, "push", "float32", params={"channels": 8}), kernel="compiled")
    assert SHARED not in per_flow.split('extern "C"', 1)[1] and _LOAD.search(per_flow)


def test_a_fixed_program_generates_no_count_code():
    inst = instantiate(load_builtin("all-to-all"), 8, 1001, 4)
    source = CupyBackend(8).source(derive_program(inst, "push", "float32"), kernel="compiled")
    assert "counts" not in source.split('extern "C"', 1)[1] and "var_move" not in source


@pytest.mark.nvcc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_variable_sources_build_without_spills(arch, tmp_path):
    builds = [
        ("all-to-all-v", "two-shot", "float32", {}),
        ("all-to-all-v", "push", "bfloat16", {"channels": 1}),
        ("all-gather-v", "push", "float32", {}),
        ("reduce-scatter-v", "direct", "float32", {}),
    ]
    if arch != "sm_100":
        # On sm_100 these reduces spill (float64 two-shot: 92 bytes; the
        # half-type reduce does in the interpreter too, D44): a B200 pays it.
        builds += [("reduce-scatter-v", "direct", "bfloat16", {}), ("reduce-scatter-v", "two-shot", "float64", {})]
    for name, strategy, dtype, params in builds:
        inst = instantiate(load_builtin(name), 8, 4097, 2 if dtype == "bfloat16" else 4 if dtype == "float32" else 8)
        program = derive_program(inst, strategy, dtype, "sum" if inst.op == "reduce" else None, params)
        source = CupyBackend(8).source(program, kernel="compiled")
        path = tmp_path / "v.cu"
        path.write_text(source)
        options = ["-x", "cu", *options_of(source)]
        assert_builds_without_spills(path, options, arch, f"{name} {strategy} {dtype}", tmp_path / "v.o")
