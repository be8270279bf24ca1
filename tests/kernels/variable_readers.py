"""Readers of the compiled datapath's variable-size code (codegen/variable.py, flat.py),
for tests without a GPU: each runs a generated launch statement by statement from its
own text for a call's counts (grouped, pooled, flat and early flat launches) and says
which elements every op moves, from where to where; the checks that the text keeps its
promises (every element once, every pool_t value in its type) are the readers' own."""

from __future__ import annotations

import re

from purlin_bench.backends.cupy.codegen.variable import SHARED

_MOVE = re.compile(
    r"char\* const src\[\d+\] = \{(?P<src>[^}]*)\}; char\* const dst\[\d+\] = \{(?P<dst>[^}]*)\};"
    r" var_move\(OP_\w+, (?P<count>.*), src, dst, tid, stride\); \}"
)
COUNT_LOAD = re.compile(r"const i64 c(\d+) = clamp_count\(__ldg\(counts \+ \1\), (\d+)ll\);")


class _Base:
    """A slice base in an evaluated address: ``b3 + x`` is (3, x)."""

    def __init__(self, index: int):
        self.index = index

    def __add__(self, offset: int) -> tuple[int, int]:
        return self.index, offset


def _python(expr: str) -> str:
    expr = re.sub(r"(\d+)ll\b", r"\1", expr).replace("(i64)sizeof(S)", "1").replace("(i64)", "")
    expr = expr.replace("gridDim.x", "gridDim").replace("blockIdx.x", "blockIdx")
    return expr.replace(f"{SHARED}[", "c[").replace("(pool_t)", "")


_CASE = re.compile(r"case \d+: \{  // rank \d+ channel \d+\n(?P<body>.*?)\n  \} break;", re.S)
# A group's counts loaded into shared memory: one thread a count, each clamped
# by its capacity, then a barrier before any op reads them.
_SHARED_LOAD = re.compile(
    r"const int id\[(?P<n>\d+)\] = \{(?P<ids>[^}]*)\}; const i64 cap\[(?P=n)\] = \{(?P<caps>[^}]*)\};\n"
    r" +for \(int k = threadIdx\.x; k < (?P=n); k \+= blockDim\.x\) "
    + re.escape(f"{SHARED}[id[k]] = clamp_count(__ldg(counts + id[k]), cap[k]); }}")
    + r"\n +__syncthreads\(\);"
)
_CHECK = re.compile(r"__ldg\(counts \+ (\d+)\); if \(n < 0 \|\| n > (\d+)ll\)")


# Counts 0..N-1 under one capacity: thread k loads count k.
_SHARED_RANGE = re.compile(
    r"for \(int k = threadIdx\.x; k < (?P<n>\d+); k \+= blockDim\.x\) "
    + re.escape(f"{SHARED}[k] = clamp_count(__ldg(counts + k), ")
    + r"(?P<cap>\d+)ll\);\n +__syncthreads\(\);"
)


def _group_counts(group: str, counts: list[int]) -> dict[int, int]:
    """The counts a group's code loads, each clamped by the capacity its own load names."""
    loads = {int(i): int(cap) for i, cap in COUNT_LOAD.findall(group)}
    for m in _SHARED_RANGE.finditer(group):
        loads |= {k: int(m["cap"]) for k in range(int(m["n"]))}
    for m in _SHARED_LOAD.finditer(group):
        ids = [int(x) for x in m["ids"].split(", ")]
        caps = [int(x.removesuffix("ll")) for x in m["caps"].split(", ")]
        loads |= dict(zip(ids, caps))
    return {i: max(0, min(counts[i], cap)) for i, cap in loads.items()}


def generated_moves(source: str, counts: list[int]):
    """Per group, in source order, its moves and barriers as the code computes
    them for ``counts``: (count, [(base, offset) ...] sources, destinations),
    or None for a barrier. A count the group did not load is a NameError."""
    body = source.split('extern "C" __global__', 1)[1]
    groups = []
    for case in _CASE.finditer(body):
        loaded = _group_counts(case["body"], counts)
        env = {f"b{i}": _Base(i) for i in range(512)} | {f"c{i}": n for i, n in loaded.items()} | {"c": loaded}
        env |= {"min": min, "max": max}
        items = []
        for line in case["body"].splitlines():
            if "__syncthreads" in line:
                items.append(None)
            elif m := _MOVE.search(line):
                srcs = [eval(_python(e), env) for e in m["src"].split(", ")]
                dsts = [eval(_python(e), env) for e in m["dst"].split(", ")]
                items.append((eval(_python(m["count"]), env), srcs, dsts))
        groups.append(items)
    return groups


def generated_view(source: str, counts: list[int]):
    """Every group's moves, in source order."""
    return [move for items in generated_moves(source, counts) for move in items if move is not None]


# Lines a pooled or flat body may hold: counts loaded into shared memory, one thread a
# count (read by _group_counts, not here), and the barrier after them; the type of its
# arithmetic, pool_t.
_SHARED_COUNT_LINES = [
    ("skip", re.compile(r"__shared__ i64 \w+\[\d+\];|__syncthreads\(\);.*")),
    ("skip", re.compile(r"for \(int k = threadIdx\.x.*|\{ const int id\[.*")),
]
_TYPE_LINE = ("type", re.compile(r"typedef (?P<type>int|i64) pool_t;.*"))

POOLED = "every block takes its share of every op"
# The pooled body's statements (variable.pooled_code), each read on its own line: a
# line the reader does not know fails the test, so none is skipped over unread.
_POOLED_LINES = [
    *_SHARED_COUNT_LINES,
    _TYPE_LINE,
    ("let", re.compile(r"const pool_t (?P<name>total|per) = (?P<expr>.*);")),
    ("share", re.compile(r"const pool_t lo = (?P<lo>.*), hi = (?P<hi>.*);")),
    ("return", re.compile(r"if \((?P<cond>[^)]*)\) return;")),
    ("start", re.compile(r"pool_t at = (?P<expr>\d+);.*")),
    ("op", re.compile(r"\{ const pool_t n = (?P<n>.*);")),
    ("part", re.compile(
        r"if \((?P<cond>[^)]*)\) \{ const pool_t a = (?P<a>.*), b = (?P<b>.*);"
        r" const pool_t first = (?P<first>.*), last = (?P<last>.*);")),
    ("move", re.compile(
        r"if \((?P<guard>[^)]*)\) \{ char\* const src\[\d+\] = \{(?P<src>[^}]*)\};"
        r" char\* const dst\[\d+\] = \{(?P<dst>[^}]*)\};"
        r" var_move\(OP_\w+, (?P<count>[^,]*), src, dst, threadIdx\.x, blockDim\.x\); \} \}")),
    ("next", re.compile(r"at \+= n; if \((?P<cond>[^)]*)\) return; \}")),
    ("skip", re.compile(r"\}")),
]


def _statements(body: str, table: list, what: str) -> list[tuple[str, re.Match]]:
    """``body``'s lines after its first, each as (kind, match) of the first pattern of
    ``table`` it matches whole; a line none matches fails (``what`` names the body)."""
    out = []
    for line in body.splitlines()[1:]:
        found = next(((kind, m) for kind, rx in table if (m := rx.fullmatch(line.strip()))), None)
        assert found, f"a {what} line the reader does not know: {line.strip()[:100]}"
        out.append(found)
    return out


def _pool_value(value: int, bits: int) -> int:
    """A pool_t value: it must fit the type the code chose (C's signed overflow is undefined)."""
    assert -(2 ** (bits - 1)) <= value < 2 ** (bits - 1), f"pool_t overflow: {value}"
    return value


def pooled_parts(source: str, counts: list[int], grid: int):
    """A pooled kernel (variable.pooled_code) run for ``counts`` on ``grid``
    blocks, statement by statement from its own text: per op in source order,
    every block's part of it as (count, sources, destinations), each slice
    (base, first element). Every pool_t value must fit the type the code
    chose; a count cast to it is wrapped as C would (no operand here is
    negative, so C's division is Python's //)."""
    body = source.split(POOLED, 1)[1].split('extern "C"', 1)[0]
    loaded = _group_counts(body, counts)
    statements = _statements(body, _POOLED_LINES, "pooled")
    bits = 32 if any(k == "type" and m["type"] == "int" for k, m in statements) else 64

    def cast(value: int) -> int:
        value &= (1 << bits) - 1
        return value - (1 << bits) if value >> (bits - 1) else value

    def run(expr: str, env: dict) -> int:
        expr = re.sub(r"\(pool_t\)(\w+\[\d+\]|\w+(?:\.x)?)", r"cast(\1)", expr)
        return eval(_python(expr).replace("/", "//"), env | {"cast": cast})

    ops: list[list] = [[] for k, _ in statements if k == "move"]
    for block in range(grid):
        env = {f"b{i}": _Base(i) for i in range(512)} | {"c": loaded, "min": min, "max": max}
        env |= {"gridDim": grid, "blockIdx": block}
        k, inside = 0, True
        for kind, m in statements:
            if kind in ("let", "start"):
                env[m["name"] if kind == "let" else "at"] = _pool_value(run(m["expr"], env), bits)
            elif kind == "share":
                env["lo"] = _pool_value(run(m["lo"], env), bits)
                env["hi"] = _pool_value(run(m["hi"], env), bits)
            elif kind == "return" and run(m["cond"], env):
                break
            elif kind == "op":
                env["n"] = _pool_value(run(m["n"], env), bits)
            elif kind == "part":
                inside = bool(run(m["cond"], env))
                if inside:
                    for name in ("a", "b", "first", "last"):
                        env[name] = _pool_value(run(m[name], env), bits)
            elif kind == "move":
                if inside and run(m["guard"], env):
                    srcs = [eval(_python(e), env) for e in m["src"].split(", ")]
                    dsts = [eval(_python(e), env) for e in m["dst"].split(", ")]
                    ops[k].append((run(m["count"], env), srcs, dsts))
                k, inside = k + 1, True
            elif kind == "next":
                env["at"] = _pool_value(env["at"] + env["n"], bits)
                if run(m["cond"], env):
                    break
    return ops


def pooled_view(source: str, counts: list[int], grid: int):
    """Each op as its blocks' parts tile it, or an AssertionError: the parts,
    in block order, must follow one another with no gap or overlap."""
    view = []
    for k, parts in enumerate(pooled_parts(source, counts, grid)):
        if not parts:
            view.append(None)  # moves nothing this call
            continue
        count, srcs, dsts = parts[0]
        for n, s, d in parts[1:]:
            assert [x for x in s + d] == [(b, at + count) for b, at in srcs + dsts], (k, parts)
            count += n
        view.append((count, srcs, dsts))
    return view


FLAT = "every thread takes elements of every op"
# The flat body's statements (flat.flat_code), each on its own line; as for the
# pooled body, a line the reader does not know fails the test.
_FLAT_LINES = [
    *_SHARED_COUNT_LINES,
    ("skip", re.compile(r"const i64 c\d+ = clamp_count.*|\}")),  # or into registers
    _TYPE_LINE,
    ("let", re.compile(r"const pool_t (?P<name>n\d+|total) = (?P<expr>.*);")),
    ("loop", re.compile(
        r"for \(pool_t e = \(pool_t\)\(blockIdx\.x \* blockDim\.x \+ threadIdx\.x\); e < total;"
        r" e \+= \(pool_t\)\(gridDim\.x \* blockDim\.x\)\) \{")),
    ("index", re.compile(r"pool_t i = e;.*")),
    ("move", re.compile(
        r"if \(i < (?P<n>n\d+)\) \{ char\* const src\[(?P<ns>\d+)\] = \{(?P<src>[^}]*)\};"
        r" char\* const dst\[(?P<nd>\d+)\] = \{(?P<dst>[^}]*)\};"
        r" move_one\(OP_\w+, 0, (?P=ns), (?P=nd), src, dst\); continue; \}")),
    ("next", re.compile(r"i -= (?P<n>n\d+);")),
]


def _flat_lets(source: str, table: list, what: str, counts: list[int]):
    """A flat launch's statements (``table``), and its values: the counts as the kernel
    loads them, then each let in order, every one checked to fit the pool_t the code chose."""
    body = source.split(FLAT, 1)[1].split('extern "C"', 1)[0]
    statements = _statements(body, table, what)
    loaded = _group_counts(body, counts)
    env = {f"b{i}": _Base(i) for i in range(512)} | {f"c{i}": n for i, n in loaded.items()} | {"c": loaded}
    bits = 32 if any(k == "type" and m["type"] == "int" for k, m in statements) else 64
    for kind, m in statements:
        if kind == "let":
            env[m["name"]] = _pool_value(eval(_python(m["expr"]), env), bits)
    return statements, env, bits


def _moved_view(moved: list[dict], ops: list) -> list:
    """flat_view's and early_view's answer from what their threads moved, per op a
    (count, sources' match, destinations' match): every element moved once, at its op's
    first addresses plus its index, and the arrays' sizes as the code declares them."""
    view = []
    for k, (n, src, dst) in enumerate(ops):
        assert sorted(moved[k]) == list(range(n)), (k, n)
        nsrc = int(src["ns"])
        assert (nsrc, int(dst["nd"])) == (src["src"].count(", ") + 1, dst["dst"].count(", ") + 1), k
        if not moved[k]:
            view.append(None)
            continue
        first = moved[k][0]
        assert all(moved[k][i] == [(b, at + i) for b, at in first] for i in moved[k]), k
        view.append((n, first[:nsrc], first[nsrc:]))
    return view


def flat_view(source: str, counts: list[int], threads: int):
    """A flat kernel (flat.flat_code) run for ``counts`` by ``threads``
    threads, statement by statement from its own text: each op as
    (count, sources, destinations) of its first element, or None where it
    moves nothing. Every element of an op must be moved once, by one thread,
    at the op's first addresses plus its index; every pool_t value must fit
    the type the code chose."""
    statements, env, bits = _flat_lets(source, _FLAT_LINES, "flat", counts)
    body_ops = [(m["n"], m) for kind, m in statements if kind == "move"]
    assert [m["n"] for kind, m in statements if kind == "next"] == [n for n, _ in body_ops]
    moved: list[dict] = [{} for _ in body_ops]
    for thread in range(threads):
        for e in range(thread, env["total"], threads):
            _pool_value(e + threads, bits)
            i = e
            for k, (n, m) in enumerate(body_ops):
                if i < env[n]:
                    at = env | {"i": i}
                    assert i not in moved[k], (k, i)
                    moved[k][i] = [eval(_python(x), at) for x in m["src"].split(", ") + m["dst"].split(", ")]
                    break
                i -= env[n]
    return _moved_view(moved, [(env[n], m, m) for n, m in body_ops])


EARLY = "store_one(x, dst);"  # a flat launch whose loads do not wait for the counts (flat.early_code)
_SRC = r"char\* const src\[(?P<ns>\d+)\] = \{(?P<src>[^}]*)\}; return value_one\(OP_\w+, 0, (?P=ns), src\);"
_DST = r"char\* const dst\[(?P<nd>\d+)\] = \{(?P<dst>[^}]*)\}; store_one\(x, dst\);"
_SPAN = r"if \(g < (?P<end>\d+)\) \{ const pool_t i = g - (?P<start>\d+);"
# The loops after a thread's first element, as the reader runs them (early_view): written out
# here, not imported, so a change to them fails until the reader follows it.
_EARLY_LOOPS = {
    "sources": [
        "for (;;) {  // the next element's loads in flight while this one is stored",
        "const pool_t h = g + step; const S y = h < END ? load(h) : x; store(g, x);",
        "if (h >= END) break; g = h; x = y;",
    ],
    "run": ["if (g < total) store(g, x);", "for (g += step; g < total; g += step) store(g, load(g));"],
}
_EARLY_LINES = [
    ("skip", re.compile(r"const i64 c\d+ = clamp_count.*|\}|\};")),
    _TYPE_LINE,
    ("end", re.compile(r"const pool_t END = (?P<end>\d+), step = \(pool_t\)\(gridDim\.x \* blockDim\.x\);")),
    ("skip", re.compile(re.escape("pool_t g = (pool_t)(blockIdx.x * blockDim.x + threadIdx.x);"))),
    ("skip", re.compile(re.escape("if (g < END) {"))),
    ("skip", re.compile(re.escape("auto load = [&](pool_t g) -> S {") + "  // .*")),
    ("skip", re.compile(re.escape("S x = load(g);") + "  // .*")),
    ("skip", re.compile(re.escape("auto store = [&](pool_t g, S x) {") + "  // .*")),
    ("let", re.compile(r"const pool_t (?P<name>n\d+|total) = (?P<expr>.*);")),
    # "sources": op k's span, from its start to its end, loaded and stored by constants and its count.
    ("span-load", re.compile(_SPAN + " " + _SRC + r" \}")),
    ("skip", re.compile(r"return S\(\);  // .*")),
    ("span-store", re.compile(_SPAN + r" if \(i < (?P<n>n\d+)\) \{ " + _DST + r" \} return; \}")),
    # "run": element g of every source, its op found by the counts as flat code finds it.
    ("load", re.compile(_SRC)),
    ("index", re.compile(r"pool_t i = g;.*")),
    ("store", re.compile(r"if \(i < (?P<n>n\d+)\) \{ " + _DST + r" return; \}")),
    ("next", re.compile(r"i -= (?P<n>n\d+);")),
    *[("loop", re.compile(re.escape(line))) for lines in _EARLY_LOOPS.values() for line in lines],
]


def early_view(source: str, counts: list[int], threads: int, windows: list[int]):
    """An early flat kernel (flat.early_code) run as flat_view runs a flat one. Thread t
    loads element t of a run of END elements whatever the counts, then the counts; its
    later elements follow in steps of ``threads``: every one of END ("sources"), or
    those under the counts' total ("run"). ``windows``: the ops' lengths at capacity.
    "sources": op k's elements are g - start for start <= g < its end, the ops' windows
    end to end; "run": the loads move with g alone (no count) over the windows' sum."""
    statements, env, bits = _flat_lets(source, _EARLY_LINES, "early", counts)
    of = {kind: [m for k, m in statements if k == kind] for kind, _ in _EARLY_LINES}
    (end,) = [int(m["end"]) for m in of["end"]]
    how = "sources" if of["span-load"] else "run"
    assert end == sum(windows) and [m.group(0) for m in of["loop"]] == _EARLY_LOOPS[how], how
    if how == "sources":  # the ops' windows end to end, in order, the same spans for loads and stores
        spans = [(sum(windows[:k]), sum(windows[: k + 1])) for k in range(len(windows))]
        for rows in (of["span-load"], of["span-store"]):
            assert [(int(m["start"]), int(m["end"])) for m in rows] == spans
        loads, stores = of["span-load"], of["span-store"]
    else:  # the counts walked in the ops' order, every op once; no count moves a load
        (load,) = of["load"]
        assert [m["n"] for m in of["next"]] == [m["n"] for m in of["store"]] and not of["span-store"]
        assert not re.search(rf"\bc\d+\b|{SHARED}\[", load["src"]), load["src"]
        loads, stores = [load] * len(of["store"]), of["store"]

    def element(g: int) -> tuple[int, int] | None:
        """(op, index) element g loads for and stores to, if it holds one this call."""
        if how == "sources":
            k = next(k for k, (a, b) in enumerate(spans) if g < b)
            i = g - spans[k][0]
            return (k, i) if i < env[stores[k]["n"]] else None
        i = g
        for k, m in enumerate(stores):
            if i < env[m["n"]]:
                return k, i
            i -= env[m["n"]]
        return None

    moved: list[dict] = [{} for _ in stores]
    for thread in range(threads):
        after = range(thread, end, threads) if how == "sources" else range(thread, env.get("total", 0), threads)
        for g in sorted({thread, *after} if thread < end else set()):
            _pool_value(g + threads, bits)
            found = element(g)
            if found is None:
                continue  # loaded and dropped
            k, i = found
            at = env | {"i": i, "g": g}
            assert i not in moved[k], (k, i)
            moved[k][i] = [eval(_python(x), at) for x in loads[k]["src"].split(", ") + stores[k]["dst"].split(", ")]
    return _moved_view(moved, [(env[m["n"]], load, m) for load, m in zip(loads, stores)])


def all_overlaps(moves):
    """Pairs of moves anywhere in a launch touching a common element, one writing it."""
    spans = [[(b, at, at + n, w) for (b, at), w in zip(s + d, [False] * len(s) + [True] * len(d))] for n, s, d in moves]
    return [(x, y) for i, a in enumerate(spans) for b in spans[:i] for x in a for y in b
            if x[0] == y[0] and (x[3] or y[3]) and x[1] < y[2] and y[1] < x[2] and x[2] > x[1] and y[2] > y[1]]


def unordered_overlaps(source: str, counts: list[int]):
    """Pairs of moves in one group with no barrier between them that touch a
    common element, one writing it: a barrier the code needed and left out."""
    found = []
    for items in generated_moves(source, counts):
        since: list = []  # (base, lo, hi, writes) of the moves since the last barrier
        for move in items:
            if move is None:
                since = []
                continue
            count, srcs, dsts = move
            mine = [(base, at, at + count, False) for base, at in srcs]
            mine += [(base, at, at + count, True) for base, at in dsts]
            for a in mine:
                for b in since:
                    if a[0] == b[0] and (a[3] or b[3]) and a[1] < b[2] and b[1] < a[2]:
                        found.append((a, b))
            since += [a for a in mine if a[2] > a[1]]
    return found


def caps_in(body: str, n: int) -> list[int]:
    """Each count's capacity as the code's check of the counts holds it."""
    found = dict(_CHECK.findall(body))
    return [int(found[str(i)]) for i in range(n)]


def reported(source: str, counts: list[int]) -> tuple[int, int] | None:
    """(count id, value) the code's check reports for ``counts``, running its lines in order."""
    bad = None
    for i, cap in _CHECK.findall(source.split('extern "C" __global__', 1)[1]):
        n = counts[int(i)]
        if n < 0 or n > int(cap):
            bad = (int(i), n)
    return bad
