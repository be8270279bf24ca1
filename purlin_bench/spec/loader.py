"""Load and validate collective specs (``collectives/*.yaml``).

A spec names, for every rank ``r`` of ``R`` ranks, the chunks of its input and
output buffers, and one op. Layouts are lists of entries::

    input:
      - chunk: c(i)             # a chunk name, optionally with index expressions
        for: i in range(R)      # zero or more loops, outermost first
        when: r == root         # optional condition; the entry is skipped if false

Names available in expressions: ``r`` (this rank), ``R`` (rank count), ``root``,
and the loop variables. See README.md for the full syntax.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from purlin_bench.base.errors import SpecError
from purlin_bench.base.resources import data_dir
from purlin_bench.spec.expr import Expr, ExprError, parse
from purlin_bench.base.yamlfile import read_yaml
from purlin_bench.base.sizes import counted

BASE_NAMES = frozenset({"r", "R", "root"})
OPS = ("copy", "reduce")
REDOPS = ("sum", "prod", "max", "min")
# variable: every chunk's size comes with each call (one count per chunk
# name); the count a command takes is then the capacity (spec/variable.py).
COUNT_MODES = ("buffer", "chunk", "variable")
_TOP_KEYS = {"name", "description", "op", "reduce", "count", "requires", "bench", "input", "output"}
_ENTRY_KEYS = {"chunk", "for", "when"}
_LOOP = re.compile(r"^\s*([A-Za-z_]\w*)\s+in\s+range\((.*)\)\s*$")
_CHUNK = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:\((.*)\))?\s*$")
# Ranks tried when a spec is loaded, so that semantic errors (no source for an
# output, two sources for a copy) surface at load with the file and field.
# Other rank counts are validated when instantiated (instantiate raises
# SpecError for that R only), so a spec broken at R = 9 fails where it is used.
LOAD_CHECK_RANKS = range(1, 9)
# Most loop iterations one rank's buffer (input or output) may take when a
# spec is instantiated. All-to-all at 64 ranks lists 64 chunks a rank, two
# nested range(R) loops 4160 iterations; a loop over range(10**9) would take
# hours and all memory before anything failed, so each loop's length is
# checked against what is left before it runs. (Python evaluates about 250k
# iterations a second, and a program has at most derive.MAX_STEPS steps.)
# At 16384 a spec at the bound took 12 s to load (LOAD_CHECK_RANKS' eight
# instances); 8192 keeps R^2 chunks a buffer at 64 ranks and halves that.
MAX_CHUNKS = 1 << 13
ITERATION_NODES = 8
# Where a spec's bench conventions are tried on load (with the ranks of
# LOAD_CHECK_RANKS it allows): a count, or a call's total, of 0, 1, a middling
# and a large one. Bench and tune evaluate them only at the end of a row or a
# study; a size that divides by zero, is 0, negative, infinite or NaN there
# crashed them or wrote rows of -4 B and NaN bandwidth (audit 26, F3/F8/F9).
BENCH_CHECK_SIZES = (0, 1, 1 << 20, 1 << 40)
# The largest total of one call's counts bench sizes a row for: counts are
# drawn as float64 shares of it (spec/variable.py), exact up to 2**53.
MAX_TOTAL = 1 << 53
MAX_ITEMSIZE = 8  # bytes of the widest element (float64, int64): a size times it must stay finite


@dataclass(frozen=True)
class Loop:
    var: str
    start: Expr
    stop: Expr
    step: Expr

    def values(self, env: dict[str, Any]) -> range:
        step = self.step.int(env)
        if step == 0:
            raise ExprError(f"range step of '{self.var}' is zero")
        return range(self.start.int(env), self.stop.int(env), step)


@dataclass(frozen=True)
class LayoutEntry:
    """One line of a layout: a chunk template, its loops and its condition."""

    where: str  # e.g. "output[1]", for error messages
    name: str
    args: tuple[Expr, ...]
    loops: tuple[Loop, ...]
    when: Expr | None

    def expand(self, env: dict[str, Any], budget: list[int] | None = None) -> list[tuple]:
        """The chunk keys this entry lists for one rank, in order.
        ``budget`` (one mutable number, shared across calls) is how many loop
        iterations are left; a loop that would take more is refused before it
        runs (ExprError)."""
        keys: list[tuple] = []
        budget = [MAX_CHUNKS] if budget is None else budget
        # An innermost iteration evaluates the condition and the chunk's
        # arguments: up to 8 syntax nodes count as one iteration (every
        # built-in spec), a costlier one as more, so the budget bounds the
        # work, not only the count (a 20,000-clause condition over 16,000
        # iterations ran for minutes).
        nodes = (self.when.cost if self.when else 0) + sum(a.cost for a in self.args)
        weight = max(1, -(-nodes // ITERATION_NODES))

        def walk(depth: int, scope: dict[str, Any]) -> None:
            if depth == len(self.loops):
                if self.when is None or self.when.bool(scope):
                    keys.append((self.name, *(a.int(scope) for a in self.args)))
                return
            loop = self.loops[depth]
            values = loop.values(scope)
            try:
                n = len(values)
            except OverflowError:  # longer than sys.maxsize
                n = MAX_CHUNKS + 1
            cost = n * weight if depth == len(self.loops) - 1 else n
            if cost > budget[0]:
                costly = ""
                if weight > 1:
                    costly = f" ({n} of {weight}x the work, for its {nodes}-term condition and arguments)"
                raise ExprError(f"loop '{loop.var}' would take more than {MAX_CHUNKS} iterations{costly} for one "
                                f"rank's buffer (R={env.get('R')}): at most {MAX_CHUNKS}, so that a spec is built "
                                "in seconds, not hours")
            budget[0] -= cost
            for value in values:
                walk(depth + 1, {**scope, loop.var: value})

        walk(0, env)
        return keys


@dataclass(frozen=True)
class BenchConventions:
    """nccl-tests conventions: message size S in elements, and the busbw factor."""

    size_elements: Expr
    busbw_factor: Expr


@dataclass(frozen=True)
class CollectiveSpec:
    name: str
    description: str
    op: str  # copy | reduce
    redop: str | None  # default reduction for op == reduce
    count_mode: str  # buffer | chunk | variable
    requires: Expr | None  # condition on R, e.g. "R % 2 == 0"
    bench: BenchConventions
    input: tuple[LayoutEntry, ...]
    output: tuple[LayoutEntry, ...]
    source: str
    rooted: bool = field(default=False)

    def supports_ranks(self, ranks: int) -> bool:
        """Whether ``requires`` allows ``ranks``; SpecError (naming the file)
        where it cannot be evaluated there, e.g. a division by zero at that R."""
        if ranks < 1 or self.requires is None:
            return ranks >= 1
        try:
            return self.requires.bool({"R": ranks})
        except ExprError as exc:
            raise _fail(self.source, "requires", f"{exc} (with {counted(ranks, 'rank')})") from None

    @property
    def variable(self) -> bool:
        """Whether its chunk sizes come with each call (``count: variable``)."""
        return self.count_mode == "variable"

    def _sized(self) -> None:
        if self.variable:
            # Bench, tune and plans size a run by one count; a variable one is
            # sized by the counts of each call (issue 31's next phase).
            raise SpecError(f"{self.name}: its sizes come with each call; bench, tune, export and plans of "
                            "variable-length collectives are not supported yet (check and show are)")

    def size_at(self, ranks: int, n: int) -> int | float:
        """``bench: size`` (S in elements) at ``n``, the count (fixed sizes,
        a whole number) or one call's total (variable sizes, where ``count``
        reads 0); a SpecError naming the file where it is not defined there,
        not finite, negative, or 0 for an ``n`` of at least 1."""
        expr = self.bench.size_elements
        env = {"total": n, "count": 0, "R": ranks} if self.variable else {"count": n, "R": ranks}
        try:
            value = expr(env) if self.variable else expr.int(env)
            fits = math.isfinite(float(value) * MAX_ITEMSIZE)
        except ExprError as exc:
            raise _fail(self.source, "bench.size", str(exc)) from None
        except OverflowError:  # an int past a float's range
            fits = False
        if not fits or value < 0 or (n >= 1 and value == 0):
            hint = ""
            if self.variable and "count" in expr.names:
                hint = " (count reads 0 in a variable collective's size; S is of one call's 'total')"
            shown = ", ".join(f"{k}={v}" for k, v in env.items() if k in expr.names)
            got = repr(value) if len(repr(value)) <= 24 else f"{repr(value)[:20]}... ({len(repr(value))} digits)"
            raise _fail(self.source, "bench.size", f"'{expr.text}' must be a finite number > 0 of elements, got "
                        f"{got}{' with ' + shown if shown else ''}{hint}")
        return value

    def busbw_at(self, ranks: int) -> float:
        """``bench: busbw`` at ``ranks``: finite and >= 0 (all-gather's is 0
        at one rank), or a SpecError naming the file."""
        expr = self.bench.busbw_factor
        try:
            value = float(expr({"R": ranks}))
        except ExprError as exc:
            raise _fail(self.source, "bench.busbw", str(exc)) from None
        except OverflowError:
            value = math.inf
        if not math.isfinite(value) or value < 0:
            raise _fail(self.source, "bench.busbw", f"'{expr.text}' must be a finite number >= 0, got {value!r} "
                        f"with R={ranks}")
        return value

    def count_for_bytes(self, ranks: int, nbytes: int, itemsize: int) -> int:
        """The count whose nccl-tests message size S is ``nbytes`` (rounded
        down, at least 1): S is linear in count, e.g. count or count * R."""
        self._sized()
        per_count = self.size_at(ranks, 1) * itemsize
        return max(1, nbytes // max(1, per_count))

    def bytes_for_count(self, ranks: int, count: int, itemsize: int) -> int:
        self._sized()
        return self.size_at(ranks, count) * itemsize

    def total_for_bytes(self, ranks: int, nbytes: int, itemsize: int) -> int:
        """A variable collective's: the sum of one call's counts whose size S
        (its ``bench: size``, an expression of ``total``) is ``nbytes``,
        rounded down, at least 1."""
        # S per element of total may be a fraction (all-to-all-v's S is total / R, per rank).
        per_total = float(self.size_at(ranks, 1)) * itemsize
        total = nbytes // per_total if per_total > 0 else 1
        if not total <= MAX_TOTAL:  # inf too: a size of total / 10**30 made 1 KiB a call of 2.6e32 elements
            raise _fail(self.source, "bench.size", f"'{self.bench.size_elements.text}' makes {nbytes} B a call of "
                        f"{total:.3g} elements with R={ranks} (at most 2**53, where a call's counts stay exact)")
        return max(1, int(total))

    def bytes_for_total(self, ranks: int, total: int, itemsize: int) -> int:
        return int(float(self.size_at(ranks, total)) * itemsize)


def _shown(keys) -> str:
    """A few unknown keys, each cut short: a file that is no spec at all (a
    password file, a log) is named, not echoed line by line into the error."""
    names = sorted(keys, key=repr)
    shown = ", ".join(repr(k)[:24] + ("..." if len(repr(k)) > 24 else "") for k in names[:3])
    return f"[{shown}{f', and {len(names) - 3} more' if names[3:] else ''}]"


def _fail(source: str, where: str, why: str) -> SpecError:
    return SpecError(f"{source}: {where}: {why}")


def _parse_expr(source: str, where: str, text: Any, names: frozenset[str]) -> Expr:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise _fail(source, where, f"expected an expression, got {type(text).__name__}")
    try:
        return parse(text, names)
    except ExprError as exc:
        raise _fail(source, where, str(exc)) from None


def _parse_entry(source: str, where: str, raw: Any) -> LayoutEntry:
    if isinstance(raw, str):
        raw = {"chunk": raw}
    if not isinstance(raw, dict):
        raise _fail(source, where, "an entry is a mapping with 'chunk' (and optional 'for', 'when') or a chunk string")
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise _fail(source, where, f"unknown key(s) {_shown(unknown)}; allowed: {sorted(_ENTRY_KEYS)}")
    if "chunk" not in raw:
        raise _fail(source, where, "missing 'chunk'")
    names = set(BASE_NAMES)
    loops: list[Loop] = []
    raw_loops = raw.get("for", [])
    if isinstance(raw_loops, str):
        raw_loops = [raw_loops]
    if not isinstance(raw_loops, list):
        raise _fail(source, f"{where}.for", "expected 'VAR in range(...)' or a list of them")
    for k, text in enumerate(raw_loops):
        loop_where = f"{where}.for[{k}]"
        match = _LOOP.match(str(text))
        if not match:
            raise _fail(source, loop_where,
                        f"expected 'VAR in range(STOP)' or 'VAR in range(START, STOP[, STEP])', got '{text}'")
        var, args = match.group(1), match.group(2)
        if var in names:
            raise _fail(source, loop_where, f"loop variable '{var}' shadows a name already in use")
        parts = _split_args(args)
        if not 1 <= len(parts) <= 3:
            raise _fail(source, loop_where, "range takes 1 to 3 arguments")
        exprs = [_parse_expr(source, loop_where, p, frozenset(names)) for p in parts]
        if len(exprs) == 1:
            exprs = [parse("0", frozenset()), exprs[0]]
        if len(exprs) == 2:
            exprs.append(parse("1", frozenset()))
        loops.append(Loop(var, *exprs))
        names.add(var)
    frozen_names = frozenset(names)
    match = _CHUNK.match(str(raw["chunk"]))
    if not match:
        raise _fail(source, f"{where}.chunk", f"expected NAME or NAME(index, ...), got '{raw['chunk']}'")
    chunk_name = match.group(1)
    arg_texts = _split_args(match.group(2)) if match.group(2) is not None else []
    args = tuple(_parse_expr(source, f"{where}.chunk", a, frozen_names) for a in arg_texts)
    when = _parse_expr(source, f"{where}.when", raw["when"], frozen_names) if "when" in raw else None
    return LayoutEntry(where, chunk_name, args, tuple(loops), when)


def _split_args(text: str) -> list[str]:
    """Split 'a, (b, c), d' at top-level commas."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += ch == "("
        depth -= ch == ")"
        current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()] if text.strip() else []


def _uses_root(entries: tuple[LayoutEntry, ...]) -> bool:
    exprs: list[Expr] = []
    for e in entries:
        exprs.extend(e.args)
        exprs.extend(e.when and [e.when] or [])
        for loop in e.loops:
            exprs.extend((loop.start, loop.stop, loop.step))
    return any("root" in x.names for x in exprs)


def parse_spec(raw: Any, source: str) -> CollectiveSpec:
    """Build a validated spec from parsed YAML; ``source`` names it in errors."""
    if not isinstance(raw, dict):
        raise _fail(source, "top level", "a spec is a mapping with name, op, input and output")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise _fail(source, "top level", f"unknown key(s) {_shown(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    for key in ("name", "op", "input", "output"):
        if key not in raw:
            raise _fail(source, key, "missing")
    name = raw["name"]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise _fail(source, "name", f"expected a name of letters, digits, '-', '_' or '.', got {name!r}")
    op = raw["op"]
    if op not in OPS:
        raise _fail(source, "op", f"expected one of {', '.join(OPS)}, got {op!r}")
    redop = raw.get("reduce", "sum" if op == "reduce" else None)
    if op == "reduce" and redop not in REDOPS:
        raise _fail(source, "reduce", f"expected one of {', '.join(REDOPS)}, got {redop!r}")
    if op == "copy" and "reduce" in raw:
        raise _fail(source, "reduce", "only a reduce collective has a reduction")
    count_mode = raw.get("count", "buffer" if op == "reduce" else "chunk")
    if count_mode not in COUNT_MODES:
        raise _fail(source, "count", f"expected one of {', '.join(COUNT_MODES)}, got {count_mode!r}")
    requires = _parse_expr(source, "requires", raw["requires"], frozenset({"R"})) if "requires" in raw else None
    bench_raw = raw.get("bench", {})
    if not isinstance(bench_raw, dict) or set(bench_raw) - {"size", "busbw"}:
        raise _fail(source, "bench", "expected a mapping with 'size' and 'busbw' expressions")
    default_size = {"buffer": "count", "chunk": "count * R", "variable": "total"}[count_mode]
    # A variable collective's size is of one call: 'total' is the sum of its counts.
    size_names = frozenset({"count", "R", "total"} if count_mode == "variable" else {"count", "R"})
    bench = BenchConventions(
        _parse_expr(source, "bench.size", bench_raw.get("size", default_size), size_names),
        _parse_expr(source, "bench.busbw", bench_raw.get("busbw", 1), frozenset({"R"})),
    )
    layouts = {}
    for side in ("input", "output"):
        entries = raw[side]
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise _fail(source, side, "expected a list of entries")
        layouts[side] = tuple(_parse_entry(source, f"{side}[{k}]", e) for k, e in enumerate(entries))
    spec = CollectiveSpec(
        name=name,
        description=_description(source, raw.get("description", "")),
        op=op,
        redop=redop,
        count_mode=count_mode,
        requires=requires,
        bench=bench,
        input=layouts["input"],
        output=layouts["output"],
        source=source,
        rooted=_uses_root(layouts["input"] + layouts["output"]),
    )
    _trial_instantiate(spec)
    return spec


MAX_DESCRIPTION = 1000


def _description(source: str, value: Any) -> str:
    """The description: text, of a bounded length, printable. `purlin list`
    prints it to a terminal, where an escape sequence in it would act (clear
    the screen, retitle the window, hide what follows) instead of showing."""
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise _fail(source, "description", f"expected text, got {type(value).__name__}")
    text = " ".join(str(value).split())  # one line: a YAML block's line breaks are layout
    if len(text) > MAX_DESCRIPTION:
        raise _fail(source, "description", f"{len(text)} characters (at most {MAX_DESCRIPTION})")
    bad = next((ch for ch in text if not ch.isprintable()), None)
    if bad is not None:
        raise _fail(source, "description", f"holds the unprintable character {bad!r} (a terminal acts on controls)")
    return text


def _trial_instantiate(spec: CollectiveSpec) -> None:
    # Imported here: instance builds on this module's types.
    from purlin_bench.spec.instance import instantiate

    for ranks in LOAD_CHECK_RANKS:
        if not spec.supports_ranks(ranks):
            continue
        for root in range(ranks) if spec.rooted else (0,):
            instantiate(spec, ranks, count=ranks, itemsize=4, root=root)
        # Bench and tune read these only after the work; fail now, in one line.
        spec.busbw_at(ranks)
        for n in BENCH_CHECK_SIZES:
            spec.size_at(ranks, n)


def load_spec_file(path: str | Path) -> CollectiveSpec:
    path = Path(path)
    raw = read_yaml(path, SpecError)
    return parse_spec(raw, str(path))


def builtin_spec_paths() -> dict[str, Path]:
    return {p.stem: p for p in sorted(data_dir("collectives").glob("*.yaml"))}


def load_builtin(name: str) -> CollectiveSpec:
    paths = builtin_spec_paths()
    if name not in paths:
        raise SpecError(f"unknown collective '{name}' (known: {', '.join(paths)})")
    return load_spec_file(paths[name])


def load_all_builtin() -> list[CollectiveSpec]:
    return [load_spec_file(p) for p in builtin_spec_paths().values()]


def resolve(name_or_path: str) -> CollectiveSpec:
    """A built-in collective by name, or a user's spec by path to a .yaml file."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        return load_spec_file(name_or_path)
    return load_builtin(name_or_path)
