"""Parity scratch in the compiled datapath's source, without a GPU: on odd
calls every rank's scratch base moves by one half, the rest of the kernel
is push's less its ready/done flags, nvcc builds it without spills, and the
datapaths that cannot move the half refuse it."""

from __future__ import annotations

import re

import pytest

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen.compiled import options_of
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.strategies.derive import derive_program
from tests.kernels.released import released_in
from tests.nvcc_build import assert_builds_without_spills


def program_of(collective: str, strategy: str, ranks: int, dtype: str = "float32", count: int = 1001):
    inst = instantiate(load_builtin(collective), ranks, count, resolve_dtype(dtype)[1].itemsize)
    return derive_program(inst, strategy, dtype, "sum")


@pytest.mark.parametrize("collective", ["all-reduce", "reduce-scatter"])
@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_odd_calls_move_every_scratch_base_by_one_half(collective, ranks, dtype):
    program = program_of(collective, "push-parity", ranks, dtype)
    source = CupyBackend(ranks).source(program, kernel="compiled")
    half = program.scratch_count * resolve_dtype(dtype)[1].itemsize
    assert half % 16 == 0  # each half starts where a 16-byte vector may
    moved = re.findall(r"if \(epoch & 1\) \{ (.*) \}", source)
    assert moved == [" ".join(f"b{3 * r + 2} += {half}ll;" for r in range(ranks))]
    # After the epoch is read, before any group's code.
    body = source.split('extern "C" __global__', 1)[1]
    assert body.index("const u64 epoch") < body.index("if (epoch & 1)") < body.index("switch (blockIdx.x / B)")
    # push's kernel has the same data moves and three times the flag traffic (ready, data, done).
    push = CupyBackend(ranks).source(program_of(collective, "push", ranks, dtype), kernel="compiled")
    assert "epoch & 1" not in push
    assert body.count("move_op<") == push.split('extern "C" __global__', 1)[1].count("move_op<")
    assert len(released_in(push)) > len(released_in(body))


def test_programs_without_parity_scratch_are_generated_as_before():
    for collective in ("all-gather", "reduce"):
        parity = CupyBackend(3).source(program_of(collective, "push-parity", 3), kernel="compiled")
        push = CupyBackend(3).source(program_of(collective, "push", 3), kernel="compiled")
        assert parity == push


@pytest.mark.nvcc
@pytest.mark.timeout(300)
def test_nvcc_builds_parity_kernels_without_spills(tmp_path):
    for collective, ranks, dtype in (("all-reduce", 8, "bfloat16"), ("reduce-scatter", 8, "float32")):
        source = CupyBackend(ranks).source(program_of(collective, "push-parity", ranks, dtype), kernel="compiled")
        path = tmp_path / "parity.cu"
        path.write_text(source)
        where = f"{collective}/push-parity R={ranks} {dtype}"
        assert_builds_without_spills(path, list(options_of(source)), "sm_90", where, tmp_path / "parity.o")
