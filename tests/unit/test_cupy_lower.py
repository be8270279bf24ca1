"""Lowering programs to the device step table: pure NumPy, no GPU needed."""

from __future__ import annotations

import re

import pytest

from purlin_bench.base.errors import ExecutionError
from purlin_bench.backends.cupy.codegen.lower import MAX_SRC, OP_COPY, OP_DTYPE, OP_REDUCE, lower
from purlin_bench.strategies.derive import derive_program
from purlin_bench.base.resources import data_dir
from purlin_bench.spec import instantiate, load_builtin


def _addr(flag):
    return 0x1000 + 8 * (flag.rank * 1000 + flag.index)


def _program(name, strategy, ranks=8, count=4096, **params):
    return derive_program(instantiate(load_builtin(name), ranks, count, 4), strategy, "float32", params=params)


def test_op_struct_matches_the_cuda_source():
    source = (data_dir("atoms") / "snac.cu").read_text()
    body = re.search(r"struct Op \{(.*?)\};", source, re.S).group(1)
    fields = re.findall(r"\b(i64|u64|int)\s+([^;]+);", body)
    names = []
    for ctype, decl in fields:
        for part in decl.split(","):
            names.append(re.sub(r"\[.*\]", "", part).strip())
    assert names == list(OP_DTYPE.names)
    assert OP_DTYPE.itemsize == 608


def test_fused_direct_all_reduce_has_no_flags_at_all():
    low = lower(_program("all-reduce", "direct"), list(range(8)), fused=True, datapath="sm", flag_address=_addr)
    assert low.ops["nwait"].sum() == 0 and low.ops["nnotify"].sum() == 0
    assert set(low.ops["op"]) == {OP_REDUCE}
    assert (low.ops["nsrc"] == 8).all()
    assert low.group_count == 8


def test_per_rank_launch_keeps_ready_and_done_flags():
    program = _program("all-reduce", "direct")
    low = lower(program, [3], fused=False, datapath="sm", flag_address=_addr)
    assert low.ops["nwait"].sum() > 0 and low.ops["nnotify"].sum() > 0
    assert (low.groups[:, 2] == 3).all()


def test_copy_engine_hoists_opening_stages_and_their_notifies():
    program = _program("all-reduce", "push")
    sm = lower(program, list(range(8)), fused=True, datapath="sm", flag_address=_addr)
    ce = lower(program, list(range(8)), fused=True, datapath="ce", flag_address=_addr)
    assert not sm.ce_copies
    assert len(ce.ce_copies) == 8 * 7  # every rank pushes its input to 7 peers' scratch
    assert ce.ops["nwait"].sum() == 0 and ce.ops["nnotify"].sum() == 0
    assert (ce.ops["op"] == OP_REDUCE).all()


def test_ring_keeps_its_data_flags_when_fused():
    low = lower(_program("all-gather", "ring"), list(range(8)), fused=True, datapath="sm", flag_address=_addr)
    assert low.ops["nnotify"].sum() == low.ops["nwait"].sum() > 0
    assert set(low.ops["op"]) >= {OP_COPY}


def test_reductions_beyond_the_source_limit_are_refused():
    program = _program("all-reduce", "direct", ranks=MAX_SRC + 1, count=MAX_SRC + 1)
    with pytest.raises(ExecutionError, match="at most 16"):
        lower(program, list(range(MAX_SRC + 1)), fused=True, datapath="sm", flag_address=_addr)


def test_bad_datapath_is_refused():
    with pytest.raises(ExecutionError, match="datapath"):
        lower(_program("all-reduce", "direct"), list(range(8)), fused=True, datapath="tma", flag_address=_addr)


def test_too_many_copy_engine_copies_are_refused_not_captured(monkeypatch):
    from purlin_bench.backends.cupy.codegen import lower as cupy_lower

    program = _program("all-reduce", "push")  # 8 x 7 opening stages
    monkeypatch.setattr(cupy_lower, "MAX_CE_COPIES", 56)
    assert len(lower(program, list(range(8)), fused=True, datapath="ce", flag_address=_addr).ce_copies) == 56
    monkeypatch.setattr(cupy_lower, "MAX_CE_COPIES", 55)
    with pytest.raises(ExecutionError, match="56 copies per call \\(at most 55\\)"):
        lower(program, list(range(8)), fused=True, datapath="ce", flag_address=_addr)


@pytest.mark.parametrize(
    ("name", "strategy", "copy_only"),
    [
        ("all-gather", "push", True),
        ("all-to-all", "push", True),
        ("broadcast", "two-shot", True),
        ("all-reduce", "two-shot", False),
        ("all-reduce", "ring", False),
        ("reduce-scatter", "direct", False),
    ],
)
def test_programs_without_a_reduce_op_get_the_copy_only_kernel(name, strategy, copy_only):
    from purlin_bench.backends.cupy.runtime.runner import copies_only

    low = lower(_program(name, strategy), list(range(8)), fused=True, datapath="sm", flag_address=_addr)
    assert copies_only([low]) is copy_only
    assert (OP_REDUCE in set(low.ops["op"].tolist())) is not copy_only
    # One launch per rank: the runner builds one kernel for all of them.
    per_rank = [lower(_program(name, strategy), [r], fused=False, datapath="sm", flag_address=_addr) for r in range(8)]
    assert copies_only(per_rank) is copy_only


# two-shot reduces (and then gathers) one eighth of the vector per op; a
# vector of fewer elements than ranks is not split
@pytest.mark.parametrize(
    ("count", "largest_op", "threads", "blocks"),
    [
        (4, 4, 512, 1),
        (4096, 512, 256, 1),
        (1 << 16, 1 << 13, 512, 4),
        (1 << 16, 1 << 13, 256, 8),
        (1 << 20, 1 << 17, 512, 64),
    ],
)
def test_a_group_gets_no_more_blocks_than_its_largest_op_has_vectors_per_thread(count, largest_op, threads, blocks):
    from purlin_bench.backends.cupy.runtime.runner import useful_blocks

    low = lower(
        _program("all-reduce", "two-shot", count=count), list(range(8)), fused=True, datapath="sm", flag_address=_addr
    )
    assert int(low.ops["count"].max()) == largest_op
    assert useful_blocks([low], 4, threads) == blocks
    # an op smaller than one vector still needs a block
    assert (
        useful_blocks(
            [
                lower(
                    _program("all-gather", "push", count=1),
                    list(range(8)),
                    fused=True,
                    datapath="sm",
                    flag_address=_addr,
                )
            ],
            4,
            512,
        )
        == 1
    )


@pytest.mark.parametrize("name", ["broadcast", "gather", "scatter", "reduce"])
def test_every_process_of_a_run_sizes_its_blocks_by_every_ranks_ops(name):
    """A waiter needs epoch x its own block count: a peer process that sized
    its launch by its own ops (none, for a broadcast's non-root) sent too few
    notifies, and rooted collectives past a few KiB timed out."""
    from purlin_bench.backends.cupy.runtime.runner import copies_only, data_blocks, sizing_lowerings
    from purlin_bench.strategies import STRATEGIES

    uneven = 0
    for strategy in STRATEGIES:
        for count in (1001, 4096, 65539):
            program = _program(name, strategy, ranks=2, count=count)
            per_rank = sizing_lowerings(program, False, "sm")
            assert len(per_rank) == 2
            own = [data_blocks([low], 4, 8192) for low in per_rank]
            uneven += len(set(own)) > 1
            fused = sizing_lowerings(program, True, "sm")
            assert data_blocks(per_rank, 4, 8192) == data_blocks(fused, 4, 8192) == max(own)
            assert copies_only(per_rank) == copies_only(fused)
    assert uneven, "the case this guards: ranks whose own ops want different counts"


def test_show_source_and_the_runner_size_a_requested_block_count_alike():
    """A requested count is a ceiling at the larger of the data's use and the
    automatic count, for the runner and for `purlin show --source` alike."""
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.backends.cupy.runtime.runner import data_blocks, group_blocks, useful_blocks

    assert group_blocks(0, 4, 16) == 4
    assert group_blocks(32, 4, 16) == 16 and group_blocks(8, 4, 16) == 8 and group_blocks(2, 4, 16) == 2
    assert group_blocks(32, 4, 16, cap_blocks=False) == 32
    program = _program(
        "scatter", "direct", ranks=8, count=16384
    )  # single-source copies: the data can use more than auto
    low = lower(program, list(range(8)), True, "sm", _addr)
    auto, useful = data_blocks([low], 4, 8192), useful_blocks([low], 4, 128)
    assert useful > auto  # the case where the two used to differ
    source = CupyBackend(8).source(program, blocks=32, threads=128, kernel="compiled")
    assert f" {group_blocks(32, auto, useful)} blocks a group" in source and group_blocks(32, auto, useful) > auto
