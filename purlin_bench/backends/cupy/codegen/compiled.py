"""The compiled datapath: one launch's step table as CUDA C++ of its own.

The interpreter (atoms/snac.cu) reads every op from a 608-byte record, then
the slice bases, then the flag addresses, before the first byte moves: a
chain of dependent global loads per op. Here the same lowered ops become
straight-line code, one ``case`` per (rank, channel) group, with counts,
offsets, flag indices and the block count as constants and the buffer
bases and flag words as kernel parameters (constant-bank loads). Every
slice's address modulo 16 bytes is known here too (BaseLayout), so an op's
vector split is a constant and no thread sets anything up for the others;
a block barrier is left only where one orders something. On the H200 this
ran 1.19x faster (geometric mean, 8 B-1 MiB) than the first version, which
worked the split out per op in thread 0 as the interpreter does
(docs/decisions.md, D14). The data movement, the flags
and the watchdog are the interpreter's own functions: the generated kernel
is appended to snac.cu's primitives, so both datapaths move bytes, order
flags and report timeouts the same way, element for element.

Pure text: tested and compiled (nvcc, in CI) without a GPU; on a GPU CuPy's
NVRTC compiles it, and caches the module on disk by a hash of the source, the
options and the toolkit, so a program compiles once per machine.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

from purlin_bench.backends.cupy.codegen import flat, variable
from purlin_bench.backends.cupy.codegen.atoms import flags_text
from purlin_bench.backends.cupy.codegen.lower import BUFFER_INDEX, MAX_DST, OFFSET_BITS, OP_COPY, OP_NONE, OP_REDUCE
from purlin_bench.backends.cupy.codegen.lower import Lowered
from purlin_bench.base.errors import CapacityError, ProgramError
from purlin_bench.program.model import Program, Ref

KERNEL = "purlin_compiled"
# What one compiled launch may hold, weighed as its build grows: each op is
# straight-line code whose size follows its operands (an 8-source reduce is
# nine slices' loads and stores) and its flags. nvcc -arch=sm_90 by weight
# (docs/decisions.md, D15; 2 cores): 72-128
# (8 reductions, or 64 copies) 0.45-0.77 s, 512 (a ring of 120 ops) 2.9 s,
# 1024 (240 ops) 9.4 s, 2048 (480 ops) 25 s, 2304 (256 reductions of 8
# sources) 65 s, 3152 (a ring reduce-scatter of 736 ops) 97-124 s; NVRTC on
# the H200 machine took the same order. Under the old bound of 1024 ops a
# tune trial spent minutes in one build, past its study's timeout, was
# killed and retried on every resume. 1024 keeps a build near 10 s; the
# defaults weigh at most 128 at 8 ranks, and a ring over many slices, whose
# per-op cost the interpreter amortises, runs interpreted.
MAX_BUILD_WEIGHT = 1024


def build_weight(lowered: Lowered) -> int:
    """Slices moved plus flags waited on or bumped, over a launch's ops:
    what its generated code, and so its build time, grows with."""
    ops = lowered.ops
    if not len(ops):
        return 0
    moving = ops["op"] != OP_NONE
    return int((ops["nsrc"] + ops["ndst"])[moving].sum() + (ops["nwait"] + ops["nnotify"]).sum())


# Where snac.cu's primitives end and its interpreter kernel begins.
_KERNEL_MARK = "// ---------------------------------------------------------------------- kernel"
_KIND = {OP_NONE: "OP_NONE", OP_COPY: "OP_COPY", OP_REDUCE: "OP_REDUCE"}
# move_op's splits of a fixed program's op (atoms/snac.cu split_of), as BaseLayout.split gives them.
SPLIT_ELEMENTS, SPLIT_VECTORS = 0, 1
_SPLIT = {SPLIT_ELEMENTS: "SPLIT_ELEMENTS", SPLIT_VECTORS: "SPLIT_VECTORS"}

_PROLOGUE = r"""
#ifndef PURLIN_UNROLL
#define PURLIN_UNROLL 2
#endif
#ifndef PURLIN_MAX_THREADS
#define PURLIN_MAX_THREADS 512
#endif
#ifndef PURLIN_MIN_BLOCKS
#define PURLIN_MIN_BLOCKS (512 / PURLIN_MAX_THREADS > 0 ? 512 / PURLIN_MAX_THREADS : 1)
#endif

// purlin_release and purlin_wait (a step's flag list): atoms/flags.cu, in primitives().
"""


# Every buffer a slice base points into starts on this many bytes (CuPy's
# pool and cudaMalloc give 256 or more); CupyRunner checks it of each base.
BASE_ALIGN = 16


@dataclass(frozen=True)
class BaseLayout:
    """Where each of a launch's 3R slice bases lies, known before any
    buffer exists: its physical buffer and element offset there (in place,
    an output base points into its input). From it the generator knows
    every slice's address modulo 16 bytes, so an op's vector split is a
    constant, and which slices overlap, so it knows where a barrier between
    two ops orders something."""

    where: tuple[tuple[int, str, int], ...]  # per base index: (rank, physical buffer, element offset)
    itemsize: int

    @classmethod
    def of(cls, program: Program, itemsize: int) -> "BaseLayout":
        where = [None] * (3 * program.ranks)
        for rank in range(program.ranks):
            for buf, k in BUFFER_INDEX.items():
                where[3 * rank + k] = program.physical(Ref(rank, buf, 0, 0))
        return cls(tuple(where), itemsize)

    def misalignment(self, index: int) -> int:
        """Bytes past a 16-byte boundary at base ``index``."""
        return self.where[index][2] * self.itemsize % BASE_ALIGN

    def span(self, packed: int, count: int) -> tuple[tuple[int, str], int, int]:
        """The buffer and element range [lo, hi) a packed slice covers."""
        index, offset = _base(int(packed))
        rank, buf, at = self.where[index]
        return (rank, buf), at + offset, at + offset + count

    def split(self, op) -> tuple[int, int]:
        """The interpreter's split (snac.cu split_of) of a fixed program's op,
        decided here: (SPLIT_VECTORS, head) or (SPLIT_ELEMENTS, 0); fixed
        programs are built without SPLIT_LOADS (D55)."""
        nsrc, ndst, count = int(op["nsrc"]), int(op["ndst"]), int(op["count"])
        mis = {
            (self.misalignment(_base(int(p))[0]) + _base(int(p))[1] * self.itemsize) % 16
            for p in [*op["src"][:nsrc], *op["dst"][:ndst]]
        }
        if len(mis) != 1 or next(iter(mis)) % self.itemsize:
            return SPLIT_ELEMENTS, 0
        head = (16 - next(iter(mis))) % 16 // self.itemsize
        return SPLIT_VECTORS, min(head, count)


def primitives(snac_source: str) -> str:
    """snac.cu up to its interpreter kernel (types, loads, flags, data
    movement), then flags.cu (a step's flag list: purlin_release, purlin_wait)."""
    if _KERNEL_MARK not in snac_source:
        raise ProgramError("atoms/snac.cu has no kernel marker: the compiled datapath cannot reuse its primitives")
    return snac_source.split(_KERNEL_MARK, 1)[0] + flags_text()


def _base(packed: int) -> tuple[int, int]:
    return packed >> OFFSET_BITS, packed & ((1 << OFFSET_BITS) - 1)


def _slices(packed: Sequence[int]) -> str:
    parts = []
    for p in packed:
        index, offset = _base(int(p))
        parts.append(f"b{index} + {offset}ll * (i64)sizeof(S)")
    return ", ".join(parts)


def _flags(ids: Sequence[int]) -> str:
    return ", ".join(f"f{_flag_rank(i)} + {int(i) & 0xFFFFF}" for i in ids)


def _flag_rank(flag: int) -> int:
    """The rank whose flag words hold ``flag`` (lower.flag_id's packing)."""
    return int(flag) >> 20


def _wait_code(op, rank: int, channel: int, jitter: bool = False) -> str:
    """Threads 0..N-1 wait on the op's N flags at once; the barrier after
    tells every thread whether any of them left an aborted call."""
    ids = [int(x) for x in op["wait_id"][: int(op["nwait"])]]
    n, step = len(ids), int(op["step"])
    return (
        "    { "
        + (f"if (threadIdx.x == 0) jitter(epoch, {step}, 1); " if jitter else "")
        + f"u64* const w[{n}] = {{{_flags(ids)}}}; const int id[{n}] = {{{', '.join(map(str, ids))}}};"
        f" const int left = purlin_wait<{n}>(w, id, target, timeout_ns, abort_flag, status, {rank}, {channel}, {step});"
        " if (__syncthreads_or(left)) { if (threadIdx.x == 0) mark_aborted(status); return; } }"
    )


# Most notifies one release carries (one a thread of the first warp).
MAX_BATCHED_NOTIFIES = 32


def _notify_code(ids: Sequence[int], step: int, jitter: bool = False) -> list[str]:
    """Thread k bumps flag k, each after its own fence, all at once (atoms/flags.cu, purlin_release)."""
    if not ids:
        return []
    barrier = "    __syncthreads();  // the whole block's writes happen before the release"
    if len(ids) == 1:
        delay = f"jitter(epoch, {step}, 2); " if jitter else ""
        return [barrier, f"    if (threadIdx.x == 0) {{ {delay}fence_release(); red_release({_flags(ids)}); }}"]
    delay = f"if (threadIdx.x == 0) jitter(epoch, {step}, 2); " if jitter else ""
    n = len(ids)
    return [barrier, f"    {{ {delay}u64* const r[{n}] = {{{_flags(ids)}}}; purlin_release<{n}>(r); }}"]


def _what(op) -> str:
    kind, count = int(op["op"]), int(op["count"])
    return {OP_NONE: "flags only", OP_COPY: f"copy {count} elements", OP_REDUCE: f"reduce {count} elements"}[kind]


def _accesses(op, layout: BaseLayout):
    """(span, written) of every slice the op touches."""
    count = int(op["count"])
    srcs = [(layout.span(p, count), False) for p in op["src"][: int(op["nsrc"])]]
    return srcs + [(layout.span(p, count), True) for p in op["dst"][: int(op["ndst"])]]


def _ordered_without_barrier(before, op, layout: BaseLayout) -> bool:
    """True when ``op`` may follow ``before`` (moved since the last barrier)
    with no barrier: every slice they share, one of them writing, is the
    same slice split the same way, so each element is read and written by
    one thread, which sees its own writes in program order."""
    split = layout.split(op)
    for prev in before:
        same_split = layout.split(prev) == split and int(prev["count"]) == int(op["count"])
        for (key, lo, hi), wrote in _accesses(prev, layout):
            for (key2, lo2, hi2), writes in _accesses(op, layout):
                if key != key2 or hi <= lo2 or hi2 <= lo or not (wrote or writes):
                    continue
                if not (same_split and (lo, hi) == (lo2, hi2)):
                    return False
    return True


def _same_source_copies(ops, k: int, end: int, layout: BaseLayout) -> list[int]:
    """The ops right after copy ``k`` that copy its one source slice, as many
    elements split the same way, waiting on nothing and needing no barrier:
    one move_op then loads the source once and stores every destination
    (push stages a rank's input to each peer as an op of its own; D48)."""
    op = ops[k]
    if int(op["op"]) != OP_COPY or int(op["nsrc"]) != 1 or int(op["nwait"]):
        return []
    same, ndst = [], int(op["ndst"])
    for j in range(k + 1, end):
        nxt = ops[j]
        alike = int(nxt["op"]) == OP_COPY and int(nxt["nsrc"]) == 1 and not int(nxt["nwait"])
        alike = alike and int(nxt["src"][0]) == int(op["src"][0]) and int(nxt["count"]) == int(op["count"])
        if not alike or layout.split(nxt) != layout.split(op) or ndst + int(nxt["ndst"]) > MAX_DST:
            break
        if not _ordered_without_barrier([ops[i] for i in (k, *same)], nxt, layout):
            break
        same.append(j)
        ndst += int(nxt["ndst"])
    return same


def _group_code(
    ops,
    begin: int,
    end: int,
    rank: int,
    channel: int,
    layout: BaseLayout,
    jitter: bool = False,
    sized: tuple[list, tuple[int, ...]] | None = None,
) -> list[str]:
    """A group's ops with every slice address and vector split a constant:
    no per-op setup by thread 0, no pointers through shared memory, and a
    barrier only where one orders something (after a wait, before a
    notify, between ops that hand elements from thread to thread).
    ``jitter`` adds the test mode's delays (snac.cu's jitter()) at each op's
    start, before each wait and before each notify, and no barrier.
    ``sized`` (a variable program's ops as variable.var_ops reads them, and
    its count capacities) sizes the slices from the call's counts."""
    lines: list[str] = []
    registers = True
    if sized is not None:
        lines.extend(variable.count_loads(sized[0][begin:end], sized[1]))
        registers = variable.in_registers(sized[0][begin:end])
    moved: list[int] = []  # ops since the last barrier
    # Notifies not yet released: ops that wait on nothing and notify different ranks release together,
    # one barrier and one fence for all (push-parity at 8 processes paid both per peer, 7 in a row). An op
    # notifying a rank already pending releases the run first, so a stream of slices to one rank (ring)
    # hands each on before writing the next. A release only moves past ops that wait on nothing, so no
    # wait can come to depend on it and every order the program had still holds (D48).
    pending: list[int] = []

    def where(base: int) -> tuple[tuple[int, str], int]:
        rank, buf, offset = layout.where[base]
        return (rank, buf), offset

    def release(step: int) -> None:
        nonlocal moved
        lines.extend(_notify_code(pending, step, jitter))
        pending.clear()
        moved = []

    k = begin
    while k < end:
        op = ops[k]
        kind, count = int(op["op"]), int(op["count"])
        nwait, nsrc = int(op["nwait"]), int(op["nsrc"])
        together = [k] if sized is not None else [k, *_same_source_copies(ops, k, end, layout)]
        ids = [int(x) for i in together for x in ops[i]["notify"][: int(ops[i]["nnotify"])]]
        again = {_flag_rank(i) for i in ids} & {_flag_rank(i) for i in pending}
        if pending and (nwait or again or len(pending) + len(ids) > MAX_BATCHED_NOTIFIES):
            release(int(ops[k - 1]["step"]))
        for i in together:
            lines.append(f"    // step {int(ops[i]['step'])}: {_what(ops[i])}{' (with the above)' if i > k else ''}")
        if jitter:
            lines.extend(f"    jitter(epoch, {int(ops[i]['step'])}, 0);" for i in together)
        if nwait:
            lines.append(_wait_code(op, rank, channel, jitter))
            moved = []
        elif kind != OP_NONE and (
            variable.may_overlap([(sized[0][i], int(ops[i]["nsrc"])) for i in moved], sized[0][k], nsrc, where)
            if sized is not None
            else not all(_ordered_without_barrier([ops[i] for i in moved], ops[j], layout) for j in together)
        ):
            lines.append("    __syncthreads();  // this op reads or writes elements another thread moved")
            moved = []
        elif kind != OP_NONE and moved:
            # No barrier, but the compiler must not move this op's loads
            # (asm volatile, no memory clobber) above the last op's plain stores.
            lines.append('    asm volatile("" ::: "memory");')
        if kind != OP_NONE and sized is not None:
            lines.append(variable.move_code(sized[0][k], nsrc, _KIND[kind], registers))
            moved.append(k)
        elif kind != OP_NONE:
            split, head = layout.split(op)
            dsts = [d for i in together for d in ops[i]["dst"][: int(ops[i]["ndst"])]]
            lines.append(
                f"    {{ char* const src[{nsrc}] = {{{_slices(op['src'][:nsrc])}}};"
                f" char* const dst[{len(dsts)}] = {{{_slices(dsts)}}};"
                f" move_op<PURLIN_UNROLL>({_KIND[kind]}, {count}ll, {nsrc}, {len(dsts)}, src, dst, "
                f"{_SPLIT[split]}, {head}, tid, stride); }}"
            )
            moved.extend(together)
        pending.extend(ids)
        k = together[-1] + 1
    if pending:
        release(int(ops[end - 1]["step"]))
    return lines


def has_flags(lowered: Lowered) -> bool:
    """Whether any op of ``lowered`` waits on or notifies a flag (a fused launch drops ready and done)."""
    ops = lowered.ops
    return bool(len(ops)) and bool((ops["nwait"] > 0).any() or (ops["nnotify"] > 0).any())


def generate(
    lowered: Lowered,
    ranks: int,
    blocks: int,
    snac_source: str,
    layout: BaseLayout,
    max_weight: int | None = MAX_BUILD_WEIGHT,
    jitter: bool = False,
    scratch_shift: int = 0,
) -> str:
    """The CUDA C++ of one launch: ``lowered`` must carry flag ids
    (``lower(..., flag_address=flag_id)``) where the interpreter has addresses,
    and ``layout`` says where its slice bases lie. ``max_weight`` None
    generates past the build bound (to time those builds: D15).
    ``jitter`` adds the test mode's delays (built only with PURLIN_JITTER_NS).
    ``scratch_shift``: bytes every rank's scratch base moves on odd calls
    (parity scratch, program/model.py; 0: none).
    """
    weight = build_weight(lowered)
    if max_weight is not None and weight > max_weight:
        raise CapacityError(
            f"this program is too large for one compiled launch ({len(lowered.ops)} ops moving or waiting on "
            f"{weight} slices and flags,"
            f" at most {max_weight}: its build would take minutes): use kernel=interpreted (or larger slices)"
        )
    ops = lowered.ops
    sized = None if lowered.sizes is None else (variable.var_ops(lowered), variable.caps_of(lowered))
    flagged = has_flags(lowered)
    if scratch_shift and not flagged:
        raise CapacityError("parity scratch needs a launch that counts its calls (one with flags)")
    out = [f"  const int B = {blocks};"]
    out.append("  const int bi = blockIdx.x % B;")
    if flagged:
        out.append("  const u64 epoch = epochs[blockIdx.x] + 1;")
        out.append("  const u64 target = epoch * (u64)B;")
        out.append("  (void)target;  // a program with notifies but no waits")
        if scratch_shift:
            # The call's half of parity scratch: the epoch counts calls from 1, as the reference executors do.
            moved = " ".join(f"b{3 * r + 2} += {scratch_shift}ll;" for r in range(ranks))
            out.append(f"  if (epoch & 1) {{ {moved} }}")
    elif jitter:
        out.append("  const u64 epoch = epochs[blockIdx.x];  // the jitter's key; nothing else counts calls here")
    else:
        # No flag is waited on or bumped: the epoch word would count nothing.
        out.append("  (void)epochs;")
    out.append("  const i64 tid = (i64)bi * blockDim.x + threadIdx.x;")
    out.append("  const i64 stride = (i64)B * blockDim.x;")
    out.append("  (void)tid; (void)stride;  // a program without data uses neither")
    def where(base: int) -> tuple[tuple[int, str], int]:
        rank, buf, offset = layout.where[base]
        return (rank, buf), offset

    groups = lowered.groups.tolist()
    if sized is not None:
        out.extend(variable.check_code(sized[1]))
    if sized is not None and not flagged and not jitter and variable.pools(groups, ops, sized[0], where):
        if flat.flat(sized[0], layout.itemsize):
            out.append("  // every thread takes elements of every op, one at a time (flat.flat_code)")
            out.extend(flat.flat_code(ops, sized[0], sized[1], _KIND, layout.itemsize))
        else:
            out.append("  // every block takes its share of every op (variable.pooled_code)")
            out.extend(variable.pooled_code(ops, sized[0], sized[1], _KIND))
        out.append("}")
        return _kernel_head(lowered, ranks, blocks, snac_source, sized) + "\n".join(out) + "\n"
    if sized is not None:
        out.extend(variable.shared_counts(lowered, sized[0]))
    out.append("  switch (blockIdx.x / B) {")
    for g, (begin, end, rank, channel) in enumerate(groups):
        out.append(f"  case {g}: {{  // rank {rank} channel {channel}")
        out.extend(_group_code(ops, begin, end, rank, channel, layout, jitter, sized))
        out.append("  } break;")
    out.append("  }")
    if flagged:
        out.append("  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;")
    out.append("}")
    return _kernel_head(lowered, ranks, blocks, snac_source, sized) + "\n".join(out) + "\n"


def _kernel_head(lowered: Lowered, ranks: int, blocks: int, snac_source: str, sized) -> str:
    """The primitives and the kernel's signature, up to its body."""
    names = [f"b{i}" for i in range(3 * ranks)] + [f"f{r}" for r in range(ranks)]
    # No __restrict__ on the bases: in place, an output base points into its input.
    params = [f"{'char' if n[0] == 'b' else 'u64'}* {n}" for n in names]
    head = [
        # Sizes per call put slices at any element: vector loads with element stores (snac.cu, D55).
        *(["#define PURLIN_SPLIT_LOADS 1"] if sized is not None else []),
        primitives(snac_source),
        _PROLOGUE + (variable.PROLOGUE if sized is not None else ""),
        f"// {len(lowered.groups)} groups, {len(lowered.ops)} ops, {blocks} blocks a group",
    ]
    head.append(f'extern "C" __global__ void __launch_bounds__(PURLIN_MAX_THREADS, PURLIN_MIN_BLOCKS) {KERNEL}(')
    if params:
        head.append("    " + ", ".join(params) + ",")
    # A variable program's counts for the call (i64, one per chunk name) come last.
    counts = ", const i64* __restrict__ counts" if sized is not None else ""
    head.append(f"    {_FIXED_PARAMS}{counts}) {{")
    return "\n".join(head) + "\n"


_FIXED_PARAMS = "u64* __restrict__ epochs, i64* status, int* abort_flag, u64 timeout_ns"
_OPTIONS_LINE = "// nvrtc "


def with_options(options: Sequence[str], source: str) -> str:
    """``source`` headed by the build options it compiles with, as
    ``purlin show --source`` prints it (``options_of`` reads them back)."""
    return f"{_OPTIONS_LINE}{' '.join(options)}\n{source}"


def options_of(text: str) -> tuple[str, ...]:
    """The build options of a source ``with_options`` wrote."""
    return tuple(text.splitlines()[0].removeprefix(_OPTIONS_LINE).split())


def params_of(source: str) -> tuple[str, ...]:
    """The slice and flag bases (``b3``, ``f0``) ``generate``'s kernel takes,
    in order, before its fixed parameters."""
    signature = source.split(f"{KERNEL}(", 1)[1].split(_FIXED_PARAMS, 1)[0]
    return tuple(p.split("*")[-1].strip() for p in signature.split(",") if p.strip())


def compiled_kernel(source: str, options: tuple[str, ...], device: int):
    """``source``'s kernel on ``device`` and the seconds this call spent
    building it (NVRTC on a machine's first use, CuPy's on-disk cache after;
    0 when this process holds it already)."""
    key = (source, options, device)
    if key in _BUILT:
        _BUILT.move_to_end(key)
        return _BUILT[key], 0.0
    kernel, seconds = _build(source, options, device)
    _BUILT[key] = kernel
    if len(_BUILT) > _BUILT_KEPT:
        # A bench of every collective from 16 B to 64 MiB, in and out of place,
        # builds more programs than this: one evicted and wanted again is
        # rebuilt (from CuPy's disk cache) and its seconds counted again.
        _BUILT.popitem(last=False)
    return kernel, seconds


_BUILT: OrderedDict[tuple, object] = OrderedDict()
_BUILT_KEPT = 256


def _build(source: str, options: tuple[str, ...], device: int):
    import cupy

    from purlin_bench.base.errors import ExecutionError

    start = time.perf_counter()
    with cupy.cuda.Device(device):
        try:
            kernel = cupy.RawModule(code=source, options=options).get_function(KERNEL)
            kernel.attributes  # loads the module now, so the build is timed here
        except cupy.cuda.compiler.CompileException as exc:
            first = next((line for line in str(exc).splitlines() if "error" in line), str(exc).splitlines()[0])
            raise ExecutionError(f"the compiled datapath failed to build: {first.strip()}") from None
    return kernel, time.perf_counter() - start
