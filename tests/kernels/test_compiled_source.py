"""The compiled datapath's source, without a GPU: what it generates for a
sample of programs (every strategy and dtype, several rank counts), that
nvcc builds it without warnings or spills, and what it refuses."""

from __future__ import annotations

import itertools
import re

import pytest

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen.atoms import DTYPE_CODES
from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, BaseLayout, build_weight, generate, options_of
from purlin_bench.backends.cupy.codegen.lower import flag_id, lower
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import CapacityError, ProgramError
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.strategies import STRATEGIES
from purlin_bench.backends.cupy.codegen.atoms import source_text
from tests.kernels.released import released, released_in
from tests.nvcc_build import assert_builds_without_spills

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce", "gather", "scatter")
RANKS = (2, 3, 8)


def sample() -> list[tuple[str, str, int, str]]:
    """Every strategy at every dtype; collectives and rank counts rotate."""
    out = []
    for i, strategy in enumerate(STRATEGIES):
        for j, dtype in enumerate(DTYPE_CODES):
            k = i * len(DTYPE_CODES) + j
            out.append((COLLECTIVES[k % len(COLLECTIVES)], strategy, RANKS[k % len(RANKS)], dtype))
    return out


def program_of(collective: str, strategy: str, ranks: int, dtype: str, count: int = 1001, inplace: bool = False):
    spec = load_builtin(collective)
    inst = instantiate(spec, ranks, count, resolve_dtype(dtype)[1].itemsize, ranks - 1 if spec.rooted else 0)
    return derive_program(inst, strategy, dtype, "sum" if inst.op == "reduce" else None, {}, inplace)


@pytest.mark.parametrize(("collective", "strategy", "ranks", "dtype"), sample())
def test_every_op_becomes_straight_line_code_with_constant_offsets(collective, strategy, ranks, dtype):
    program = program_of(collective, strategy, ranks, dtype)
    low = lower(program, list(range(ranks)), True, "sm", flag_id)
    source = CupyBackend(ranks).source(program, kernel="compiled")
    body = source.split('extern "C" __global__', 1)[1]
    assert body.count("case ") == len(low.groups)
    # one data movement per copy or reduce op, or per run of copies of one source
    # (compiled.py's _same_source_copies), with its count as a constant
    moving = [op for op in low.ops if op["op"]]
    calls = re.findall(r"move_op<PURLIN_UNROLL>\(OP_\w+, (\d+)ll, (\d+), (\d+), src, dst, ", body)
    assert len(calls) == body.count("move_op<") <= len(moving)
    assert sum(int(ndst) for _, _, ndst in calls) == sum(int(op["ndst"]) for op in moving)
    for op in moving:
        # static slices: the pointers are constants off the bases, not shared state
        assert (str(int(op["count"])), str(int(op["nsrc"]))) in {(c, n) for c, n, _ in calls}
    assert "s_src" not in body and "__shared__ char*" not in body
    # every wait and notify names its flag as a parameter plus a constant index
    waits = sum(int(op["nwait"]) for op in low.ops)
    assert len(re.findall(r"purlin_wait<\d+>", body)) == sum(1 for op in low.ops if op["nwait"])
    assert sum(int(m) for m in re.findall(r"u64\* const w\[(\d+)\]", body)) == waits
    assert len(released_in(body)) == sum(int(op["nnotify"]) for op in low.ops)
    # nothing is read from an op record: no table, no pointer chasing
    assert "ops[" not in body and "Op*" not in body


def test_the_same_program_generates_the_same_source_and_another_program_another():
    a = CupyBackend(8).source(program_of("all-reduce", "two-shot", 8, "float32"), kernel="compiled")
    b = CupyBackend(8).source(program_of("all-reduce", "two-shot", 8, "float32"), kernel="compiled")
    c = CupyBackend(8).source(program_of("all-reduce", "two-shot", 8, "float32", count=1002), kernel="compiled")
    assert a == b and a != c  # the disk cache is keyed by the source: one build per program


def test_a_program_past_the_op_bound_is_refused_with_the_way_out():
    # A ring of 16 KiB slices over 4 MiB: thousands of ops.
    spec = load_builtin("all-reduce")
    program = derive_program(instantiate(spec, 8, 1 << 20, 4), "ring", "float32", "sum", {"slice_bytes": 16384}, False)
    low = lower(program, list(range(8)), True, "sm", flag_id)
    assert build_weight(low) > MAX_BUILD_WEIGHT
    with pytest.raises(ProgramError, match="kernel=interpreted"):
        generate(low, 8, 2, source_text(), BaseLayout.of(program, 4))


def _nvcc_builds_without_spills(source: str, where: str, arch: str, tmp_path) -> None:
    options = list(options_of(source))
    path = tmp_path / "compiled.cu"
    path.write_text(source)
    assert_builds_without_spills(path, options, arch, where, tmp_path / "compiled.o")


@pytest.mark.nvcc
@pytest.mark.timeout(600)
@pytest.mark.parametrize("arch", ("sm_90",))
def test_nvcc_builds_the_sample_without_warnings_or_spills(arch, tmp_path):
    for collective, strategy, ranks, dtype in sample():
        program = program_of(collective, strategy, ranks, dtype)
        source = CupyBackend(ranks).source(program, kernel="compiled")
        _nvcc_builds_without_spills(source, f"{collective}/{strategy} R={ranks} {dtype}", arch, tmp_path)


@pytest.mark.nvcc
@pytest.mark.timeout(600)
def test_nvcc_builds_every_compiled_default_without_spills(tmp_path):
    """What the default runs up to 64 KiB (compiled, 128 threads, copies at
    unroll 4) and at 1 MiB (compiled, 512 threads), at the most ranks it is
    chosen for, every collective and dtype."""
    from purlin_bench.backends.cupy.defaults import DEFAULTS

    COMPILED_MAX_RANKS, COMPILED_SMALL_BYTES = DEFAULTS.compiled_max_ranks, DEFAULTS.compiled_small_bytes
    from purlin_bench.tools.bench.run import instances
    from purlin_bench.measure.service import MeasurementService

    ranks = COMPILED_MAX_RANKS
    service = MeasurementService(CupyBackend(ranks))
    for collective, dtype, nbytes in itertools.product(COLLECTIVES, DTYPE_CODES, (COMPILED_SMALL_BYTES, 1 << 20)):
        ((_, inst, _),) = instances(load_builtin(collective), [nbytes], ranks, dtype, 0)
        config = service.default_config(inst)
        assert dict(config.exec_params)["kernel"] == "compiled"
        program = derive_program(
            inst, config.strategy, dtype, "sum" if inst.op == "reduce" else None, dict(config.plan_params), False
        )
        source = CupyBackend(ranks).source(program, **dict(config.exec_params))
        _nvcc_builds_without_spills(source, f"{collective} default {config.text()} {dtype}", "sm_90", tmp_path)


def _thread_of(aligned: bool, head: int, count: int, vec: int, stride: int, e: int) -> int:
    """Which thread of a group move_op (atoms/snac.cu) gives element ``e`` of
    an op: vectors v go to thread v % stride, the scalar edges (the head,
    then the tail) are numbered on after and dealt the same way."""
    if not aligned:
        return e % stride
    nvec = (count - head) // vec
    tail = head + nvec * vec
    if head <= e < tail:
        return (e - head) // vec % stride
    return (e if e < head else head + (e - tail)) % stride


def _elements(layout: BaseLayout, op):
    """{(buffer, element): (wrote, index in the slice)} of one op."""
    out = {}
    count = int(op["count"])
    for packed, wrote in [(p, False) for p in op["src"][: int(op["nsrc"])]] + [
        (p, True) for p in op["dst"][: int(op["ndst"])]
    ]:
        key, lo, _ = layout.span(packed, count)
        for i in range(count):
            was = out.get((key, lo + i), (False, i))
            out[(key, lo + i)] = (was[0] or wrote, i)
    return out


@pytest.mark.parametrize(
    ("collective", "strategy", "ranks", "dtype", "inplace"),
    # all-to-all has no in-place form (its input and output do not nest)
    [(*case, inplace) for case in sample() for inplace in (False, True) if not (inplace and case[0] == "all-to-all")],
)
def test_where_a_barrier_is_left_out_no_element_changes_thread(collective, strategy, ranks, dtype, inplace):
    """The static path drops the per-op barrier unless it orders something.
    Read from the generated code: between two ops with no barrier between
    them, every element both touch, one writing, is moved by the same thread
    in both (so program order is enough); checked with move_op's
    element-to-thread map, not with the generator's own rule."""
    itemsize = resolve_dtype(dtype)[1].itemsize
    for count in (1, 1001, 4099):
        program = program_of(collective, strategy, ranks, dtype, count=count, inplace=inplace)
        low = lower(program, list(range(ranks)), True, "sm", flag_id)
        layout = BaseLayout.of(program, itemsize)
        for blocks, threads in ((1, 128), (3, 512)):
            stride = blocks * threads
            body = generate(low, ranks, blocks, source_text(), layout).split("switch (blockIdx.x / B) {", 1)[1]
            cases = body.split("  case ")[1:]
            assert len(cases) == len(low.groups)

            def self_check(k: int, since: list[int]) -> None:
                """Every element op ``k`` shares with an op of ``since``, one writing, is on one thread."""
                op = low.ops[k]
                split = layout.split(op)
                mine = _elements(layout, op)
                for j in since:
                    prev = low.ops[j]
                    psplit = layout.split(prev)
                    for where, (wrote, i) in _elements(layout, prev).items():
                        if where not in mine or not (wrote or mine[where][0]):
                            continue
                        a = _thread_of(*psplit, int(prev["count"]), 16 // itemsize, stride, i)
                        b = _thread_of(*split, int(op["count"]), 16 // itemsize, stride, mine[where][1])
                        assert a == b, (
                            f"{collective}/{strategy} R={ranks} count={count}: ops {j} and {k}"
                            f" share {where} on threads {a} and {b} with no barrier"
                        )

            for (begin, end, _, _), case in zip(low.groups.tolist(), cases):
                by_step = {int(low.ops[k]["step"]): k for k in range(begin, end) if low.ops[k]["op"]}
                covered: list[int] = []  # the moving ops whose step comment came since the last move
                since: list[int] = []
                previous = ""
                for line in case.splitlines():
                    step = re.match(r"    // step (\d+):", line)
                    if step and int(step.group(1)) in by_step:
                        covered.append(by_step[int(step.group(1))])
                    if "__syncthreads(" in line or "__syncthreads_or(" in line:  # a wait's barrier is an _or
                        since = []
                    elif "move_op<" in line:
                        # a compiler fence keeps program order where no barrier does
                        assert not since or 'asm volatile("" ::: "memory")' in previous
                        # One move_op runs one op, or copies of one source merged (each checked
                        # against the ops before it in the move as well: a thread stores them in turn).
                        assert covered, line
                        merged, covered = covered, []
                        for k in merged:
                            self_check(k, since)
                            since.append(k)
                    previous = line


@pytest.mark.parametrize(
    ("collective", "strategy"), [("all-gather", "direct"), ("all-reduce", "ring"), ("all-to-all", "two-shot")]
)
def test_every_flag_of_a_wait_or_notify_has_a_thread_of_its_own(collective, strategy):
    """Launches of one rank keep their waits and notifies (the call
    protocol), on every peer at once: thread w waits on flag w and thread k
    bumps flag k, and every wait ends in a barrier that tells every thread
    whether any of them left an aborted call (no shared word to race on)."""
    program = program_of(collective, strategy, 3, "float32")
    layout = BaseLayout.of(program, 4)
    waits_seen = notifies_seen = 0
    for rank in range(3):
        low = lower(program, [rank], False, "sm", flag_id)
        body = generate(low, 3, 1, source_text(), layout).split("switch (blockIdx.x / B) {", 1)[1]
        assert "s_abort" not in body
        for line in body.splitlines():
            if "purlin_wait<" in line:
                n = int(re.search(r"purlin_wait<(\d+)>", line).group(1))
                assert line.count(" + ") >= n and "if (__syncthreads_or(left))" in line.split("purlin_wait<", 1)[1]
                waits_seen += 1
            if "purlin_release<" in line:
                # Thread k takes flag k of the list by selects (atoms/flags.cu): the list is the line's.
                assert len(released(line)) == len(set(released(line))) > 1, line
                notifies_seen += 1
    assert waits_seen > 3 and (notifies_seen > 0 or strategy != "direct")  # direct: every peer's ready at once


def test_the_layout_knows_in_place_aliasing_and_each_base_alignment():
    program = program_of("all-gather", "direct", 3, "float32", count=1001, inplace=True)
    layout = BaseLayout.of(program, 4)
    # rank 1's input is its output's second chunk: 1001 floats in, 4004 bytes, 4 past a boundary
    assert layout.where[3 * 1 + 0] == (1, "out", 1001)
    assert layout.misalignment(3 * 1 + 0) == 4004 % 16 and layout.misalignment(3 * 1 + 1) == 0


def test_ops_that_share_no_element_pass_no_barrier_between_them():
    # all-to-all two-shot: per group, copies of disjoint chunks, no flag left in a fused launch
    program = program_of("all-to-all", "two-shot", 8, "float32")
    low = lower(program, list(range(8)), True, "sm", flag_id)
    body = CupyBackend(8).source(program, kernel="compiled").split('extern "C" __global__', 1)[1]
    assert len(low.ops) > 100 and not (low.ops["nwait"].any() or low.ops["nnotify"].any())
    assert body.count("__syncthreads()") == 0


def test_build_seconds_are_counted_once_per_build_also_after_eviction(monkeypatch):
    """What bench's `# build:` line adds up: a program held in the process
    costs 0 s again; one evicted from the process's table and wanted again
    is built again, and counted again."""
    from purlin_bench.backends.cupy.codegen import compiled

    builds = []
    monkeypatch.setattr(
        compiled, "_build", lambda source, options, device: (builds.append(source) or f"kernel {source}", 1.5)
    )
    monkeypatch.setattr(compiled, "_BUILT", type(compiled._BUILT)())
    monkeypatch.setattr(compiled, "_BUILT_KEPT", 2)
    assert compiled.compiled_kernel("a", (), 0) == ("kernel a", 1.5)
    assert compiled.compiled_kernel("a", (), 0) == ("kernel a", 0.0)
    compiled.compiled_kernel("b", (), 0)
    compiled.compiled_kernel("a", (), 0)  # a is now the most recent: c evicts b
    compiled.compiled_kernel("c", (), 0)
    assert compiled.compiled_kernel("a", (), 0)[1] == 0.0
    assert compiled.compiled_kernel("b", (), 0)[1] == 1.5
    assert builds == ["a", "b", "c", "b"]


def test_the_build_bound_weighs_operands_not_only_ops():
    # 256 reductions of 8 sources each took nvcc a minute (2026-12-04), where
    # 240 ring ops of one or two slices took 9 s: the first is refused.
    def weight(name, strategy, count, params):
        program = derive_program(
            instantiate(load_builtin(name), 8, count, 4), strategy, "float32", "sum", params, False
        )
        return build_weight(lower(program, list(range(8)), True, "sm", flag_id))

    heavy = weight("reduce-scatter", "two-shot", 1024, {"channels": 4})
    light = weight("all-reduce", "ring", 262144, {"slice_bytes": 65536})
    assert light <= MAX_BUILD_WEIGHT < heavy
    program = derive_program(
        instantiate(load_builtin("reduce-scatter"), 8, 1024, 4), "two-shot", "float32", "sum", {"channels": 4}, False
    )
    low = lower(program, list(range(8)), True, "sm", flag_id)
    assert len(low.ops) == 256  # within the old bound of ops alone
    with pytest.raises(CapacityError, match="too large for one compiled launch"):
        generate(low, 8, 1, source_text(), BaseLayout.of(program, 4))


def _signature_and_body(source: str) -> tuple[str, str]:
    head, body = source.split(") {\n  const int B", 1)
    return head.rsplit("purlin_compiled(", 1)[1], body


@pytest.mark.parametrize(("collective", "strategy", "ranks", "dtype"), sample()[::4])
def test_jitter_adds_delays_and_nothing_else(collective, strategy, ranks, dtype):
    """The test mode's source is the default's with jitter() calls added: no
    barrier more or less (one would hide the races it is there to show)."""
    from purlin_bench.backends.cupy.runtime.runner import KernelSettings

    program = program_of(collective, strategy, ranks, dtype)
    plain = CupyBackend(ranks, settings=KernelSettings()).source(program, kernel="compiled")
    shaken = CupyBackend(ranks, settings=KernelSettings(jitter_ns=3000)).source(program, kernel="compiled")
    assert "jitter(" not in _signature_and_body(plain)[1]
    assert shaken.count("__syncthreads") == plain.count("__syncthreads")
    assert "-DPURLIN_JITTER_NS=3000" in shaken.splitlines()[0]
    ops = len(re.findall(r"// step \d+:", shaken))
    assert len(re.findall(r"jitter\(epoch, \d+, 0\);", shaken)) == ops  # one at every op's start
    body = _signature_and_body(shaken)[1]
    assert len(re.findall(r"jitter\(epoch, \d+, 1\); u64\* const w", body)) == body.count(
        "purlin_wait<"
    )  # before each wait
    assert len(re.findall(r"jitter\(epoch, \d+, 2\); (fence_release\(\)|u64\* const r)", body)) == body.count(
        "fence_release()"
    ) + body.count("purlin_release<")  # each notify
    stripped = re.sub(r"    jitter\(epoch, \d+, 0\);\n", "", _signature_and_body(shaken)[1])
    stripped = re.sub(r"(if \(threadIdx.x == 0\) )?jitter\(epoch, \d+, [12]\); ", "", stripped)
    assert (
        stripped.replace(
            "  const u64 epoch = epochs[blockIdx.x];  // the jitter's key; nothing else counts calls here\n",
            "  (void)epochs;\n",
        )
        == _signature_and_body(plain)[1]
    )


@pytest.mark.nvcc
@pytest.mark.timeout(600)
def test_nvcc_builds_the_jittered_sample(tmp_path):
    from purlin_bench.backends.cupy.runtime.runner import KernelSettings

    for collective, strategy, ranks, dtype in sample()[::3]:
        program = program_of(collective, strategy, ranks, dtype)
        source = CupyBackend(ranks, settings=KernelSettings(jitter_ns=2000)).source(program, kernel="compiled")
        _nvcc_builds_without_spills(source, f"jittered {collective}/{strategy} R={ranks} {dtype}", "sm_90", tmp_path)
