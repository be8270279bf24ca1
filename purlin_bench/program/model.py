"""SNAC programs as plain, frozen, serialisable data.

A :class:`Program` holds, for every rank, one ordered list of steps per channel.
A step is one of:

* :class:`Stage`  - move a slice, with no wait, to where its consumer will find it
  (a peer's scratch or output: push), or nowhere (``dsts == ()``: the input
  itself is the staging place, and a Notify follows).
* :class:`Notify` - bump one flag word of a peer (a release): "what I staged is there".
  ``role`` says why: ``ready`` (my buffers are in this call and may be accessed),
  ``data`` (a slice is staged), ``done`` (I no longer touch your buffers).
* :class:`Consume` - wait (acquire) until its flags are bumped, then copy or
  reduce its sources (local or remote: pull) into its destinations (local or
  remote: push). ``op == "wait"`` only waits.

Every flag is bumped by exactly one Notify per call; executors keep flags as
epoch counters, so a program runs again with no reset. Slices are in elements
of the program's dtype.

**Variable sizes** (all-to-all-v and kin, ``count: variable`` specs): such a
program is built once for a capacity and serves every call whatever its
per-call counts ``n`` (one per chunk name, ``Program.count_names``, each at
most ``Program.count_caps``). Its refs give offset and count *as at capacity*
(every ``n[k] == count_caps[k]``), plus what moves with the counts: at run
time a ref starts at ``offset + sum(n[b] - count_caps[b] for b in base)`` and
moves ``clamp(n[var] - at, 0, count)`` elements, i.e. the part of its window
``[at, at + count)`` of chunk ``var`` that this call's chunk holds. A slice
past a chunk's count moves nothing; steps and flags never depend on the
counts (program/variable.py resolves refs; validate.py proves the program for
every count vector).

**Parity scratch** (``Program.parity_scratch``): a rank's scratch is two
halves of ``scratch_count`` elements, and call number e (counting from 1)
uses half ``e % 2``. A peer that only writes a rank's scratch may then skip
the ``ready``/``done`` window around it: its write in call e lands in a half
the rank last read in call e - 2, and the validator proves that the rank
said something the peer waited for in between (validate.py, check 3).
That holds only while this program's calls alone use that memory: an
executor gives each runner's parity scratch to it alone (in memory other
runners share, a peer still in one runner's call would write it during
another runner's call).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from purlin_bench.base.errors import ProgramError

# The newest program schema this reader understands. Programs with variable
# sizes are written as schema 2 (refs carry the symbolic part), so an older
# reader says "upgrade" instead of misreading them; fixed-size programs stay
# schema 1, byte for byte as before.
FIXED_SCHEMA = 1
VARIABLE_SCHEMA = 2
# Parity scratch (module doc): a reader that ignored it would run the
# program without the windows it dropped, so it says "upgrade" instead.
PARITY_SCHEMA = 3
SCHEMA_VERSION = PARITY_SCHEMA
BUFFERS = ("in", "out", "scratch")
ROLES = ("ready", "data", "done")
CONSUME_OPS = ("copy", "reduce", "wait")


@dataclass(frozen=True)
class Ref:
    """``count`` elements at ``offset`` of buffer ``buf`` of rank ``rank``.

    In a variable-size program (see the module doc) offset and count are the
    capacity's; ``base`` lists the per-call counts whose chunks precede this
    one in its buffer (the offset moves with them) and ``var`` the count that
    clips the window ``[at, at + count)`` (None: a fixed size)."""

    rank: int
    buf: str
    offset: int
    count: int
    base: tuple[int, ...] = ()
    var: int | None = None
    at: int = 0

    @property
    def symbolic(self) -> bool:
        return self.var is not None or bool(self.base)

    def text(self) -> str:
        if self.symbolic:
            return f"r{self.rank}.{self.buf}[{self.offset}:{self.offset + self.count}]{sym_text(self)}"
        return f"r{self.rank}.{self.buf}[{self.offset}:{self.offset + self.count}]"


def sym_text(ref: Ref) -> str:
    """What moves with the counts, after the capacity's slice in error
    messages: ``{after n0,n1; n5[128:384]}`` is a slice placed after the
    chunks of counts 0 and 1 that holds what of count 5's window [128, 384)
    the call's n5 covers."""
    parts = []
    if ref.base:
        parts.append("after " + ",".join(f"n{b}" for b in ref.base))
    if ref.var is not None:
        parts.append(f"n{ref.var}[{ref.at}:{ref.at + ref.count}]")
    return "{" + "; ".join(parts) + "}"


@dataclass(frozen=True)
class FlagRef:
    """Flag word ``index`` of rank ``rank``; only that rank waits on it."""

    rank: int
    index: int

    def text(self) -> str:
        return f"r{self.rank}.flag[{self.index}]"


@dataclass(frozen=True)
class Stage:
    src: Ref
    dsts: tuple[Ref, ...] = ()
    kind: str = field(default="stage", init=False)


@dataclass(frozen=True)
class Notify:
    flag: FlagRef
    role: str = "data"
    kind: str = field(default="notify", init=False)


@dataclass(frozen=True)
class Consume:
    waits: tuple[FlagRef, ...]
    op: str
    srcs: tuple[Ref, ...] = ()
    dsts: tuple[Ref, ...] = ()
    kind: str = field(default="consume", init=False)


Step = Union[Stage, Notify, Consume]


@dataclass(frozen=True)
class StepId:
    rank: int
    channel: int
    index: int

    def text(self) -> str:
        return f"rank {self.rank} channel {self.channel} step {self.index}"


@dataclass(frozen=True)
class Program:
    collective: str
    strategy: str
    params: tuple[tuple[str, Any], ...]
    ranks: int
    root: int
    count: int
    dtype: str
    redop: str | None
    inplace: bool
    in_counts: tuple[int, ...]
    out_counts: tuple[int, ...]
    scratch_count: int  # elements of scratch every rank has (symmetric)
    flag_counts: tuple[int, ...]  # flag words per rank
    # In place, each rank's smaller buffer (in or out) is a view of its larger
    # one (out when sizes tie) at this offset; None out of place.
    inplace_offsets: tuple[int, ...] | None
    lists: tuple[tuple[tuple[Step, ...], ...], ...]  # [rank][channel] -> steps
    schema: int = FIXED_SCHEMA
    # Variable sizes (module doc): the per-call counts, by chunk name, and the
    # most each may be (the capacity the buffers and slices are built for).
    # Both empty for a fixed-size program.
    count_names: tuple[str, ...] = ()
    count_caps: tuple[int, ...] = ()
    # Two halves of scratch, alternating by call (module doc).
    parity_scratch: bool = False

    @property
    def variable(self) -> bool:
        """Whether its sizes come with each call (a counts vector)."""
        return bool(self.count_caps)

    @property
    def channels(self) -> int:
        return max((len(ch) for ch in self.lists), default=0)

    def steps(self) -> Iterator[tuple[StepId, Step]]:
        for rank, chans in enumerate(self.lists):
            for channel, steps in enumerate(chans):
                for index, step in enumerate(steps):
                    yield StepId(rank, channel, index), step

    def step_count(self) -> int:
        return sum(len(steps) for chans in self.lists for steps in chans)

    def physical(self, ref: Ref) -> tuple[int, str, int]:
        """Where ``ref`` lives: (rank, buffer, offset) after in-place aliasing."""
        if self.inplace_offsets is None or ref.buf == "scratch":
            return ref.rank, ref.buf, ref.offset
        larger = "out" if self.out_counts[ref.rank] >= self.in_counts[ref.rank] else "in"
        if ref.buf == larger:
            return ref.rank, ref.buf, ref.offset
        return ref.rank, larger, ref.offset + self.inplace_offsets[ref.rank]

    def buffer_count(self, rank: int, buf: str) -> int:
        """Elements of ``rank``'s buffer that one call addresses."""
        if buf == "in":
            return self.in_counts[rank]
        if buf == "out":
            return self.out_counts[rank]
        return self.scratch_count

    def allocated_count(self, rank: int, buf: str) -> int:
        """Elements an executor allocates for it: both halves of parity scratch."""
        return self.buffer_count(rank, buf) * (2 if buf == "scratch" and self.parity_scratch else 1)

    def scratch_shift(self, epoch: int) -> int:
        """Elements past scratch's start that call ``epoch`` (from 1) addresses it at."""
        return self.scratch_count * (epoch % 2) if self.parity_scratch else 0

    # -- serialisation -------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "collective": self.collective,
            "strategy": self.strategy,
            "params": dict(self.params),
            "ranks": self.ranks,
            "root": self.root,
            "count": self.count,
            "dtype": self.dtype,
            "redop": self.redop,
            "inplace": self.inplace,
            "in_counts": list(self.in_counts),
            "out_counts": list(self.out_counts),
            "scratch_count": self.scratch_count,
            "flag_counts": list(self.flag_counts),
            "inplace_offsets": None if self.inplace_offsets is None else list(self.inplace_offsets),
            "lists": [[[_step_to_dict(s) for s in steps] for steps in chans] for chans in self.lists],
            **({"count_names": list(self.count_names), "count_caps": list(self.count_caps)} if self.variable else {}),
            **({"parity_scratch": True} if self.parity_scratch else {}),
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "Program":
        try:
            schema = int(data["schema"])
            if schema > SCHEMA_VERSION:
                raise ProgramError(
                    f"program schema {schema} is newer than this purlin-bench understands "
                    f"({SCHEMA_VERSION}); upgrade purlin-bench"
                )
            offsets = data["inplace_offsets"]
            return Program(
                collective=str(data["collective"]),
                strategy=str(data["strategy"]),
                params=tuple(sorted(data["params"].items())),
                ranks=int(data["ranks"]),
                root=int(data["root"]),
                count=int(data["count"]),
                dtype=str(data["dtype"]),
                redop=data["redop"],
                inplace=bool(data["inplace"]),
                in_counts=tuple(int(x) for x in data["in_counts"]),
                out_counts=tuple(int(x) for x in data["out_counts"]),
                scratch_count=int(data["scratch_count"]),
                flag_counts=tuple(int(x) for x in data["flag_counts"]),
                inplace_offsets=None if offsets is None else tuple(int(x) for x in offsets),
                lists=tuple(
                    tuple(tuple(_step_from_dict(s) for s in steps) for steps in chans) for chans in data["lists"]
                ),
                schema=schema,
                count_names=tuple(str(x) for x in data.get("count_names", ())),
                count_caps=tuple(int(x) for x in data.get("count_caps", ())),
                parity_scratch=bool(data.get("parity_scratch", False)),
            )
        except ProgramError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProgramError(f"not a valid program: {type(exc).__name__}: {exc}") from None


def _ref_to_list(ref: Ref) -> list:
    if ref.symbolic:  # only variable programs: fixed ones are written as before
        return [ref.rank, ref.buf, ref.offset, ref.count, list(ref.base), ref.var, ref.at]
    return [ref.rank, ref.buf, ref.offset, ref.count]


def _ref_from_list(raw: list) -> Ref:
    if len(raw) == 7:
        rank, buf, offset, count, base, var, at = raw
        sym = {"base": tuple(int(b) for b in base), "var": None if var is None else int(var), "at": int(at)}
    else:
        (rank, buf, offset, count), sym = raw, {}
    if buf not in BUFFERS:
        raise ValueError(f"unknown buffer {buf!r}")
    return Ref(int(rank), str(buf), int(offset), int(count), **sym)


def _step_to_dict(step: Step) -> dict[str, Any]:
    if isinstance(step, Stage):
        return {"kind": "stage", "src": _ref_to_list(step.src), "dsts": [_ref_to_list(d) for d in step.dsts]}
    if isinstance(step, Notify):
        return {"kind": "notify", "flag": [step.flag.rank, step.flag.index], "role": step.role}
    return {
        "kind": "consume",
        "waits": [[f.rank, f.index] for f in step.waits],
        "op": step.op,
        "srcs": [_ref_to_list(s) for s in step.srcs],
        "dsts": [_ref_to_list(d) for d in step.dsts],
    }


def _step_from_dict(raw: dict[str, Any]) -> Step:
    kind = raw["kind"]
    if kind == "stage":
        return Stage(_ref_from_list(raw["src"]), tuple(_ref_from_list(d) for d in raw["dsts"]))
    if kind == "notify":
        if raw["role"] not in ROLES:
            raise ValueError(f"unknown notify role {raw['role']!r}")
        return Notify(FlagRef(*map(int, raw["flag"])), raw["role"])
    if kind == "consume":
        if raw["op"] not in CONSUME_OPS:
            raise ValueError(f"unknown consume op {raw['op']!r}")
        return Consume(
            tuple(FlagRef(*map(int, f)) for f in raw["waits"]),
            raw["op"],
            tuple(_ref_from_list(s) for s in raw["srcs"]),
            tuple(_ref_from_list(d) for d in raw["dsts"]),
        )
    raise ValueError(f"unknown step kind {kind!r}")
