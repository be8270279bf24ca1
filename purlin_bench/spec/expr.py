"""A small, safe expression language for spec templates.

Specs write index arithmetic such as ``(r + 1) % R`` or conditions such as
``r == root``. We parse them with Python's ``ast`` and evaluate only a
whitelist of node types; there is no ``eval``, no attribute access, no calls
except ``min``, ``max`` and ``abs``. ``%`` and ``//`` follow Python (the result
of ``(r - 1) % R`` is never negative), which is what index arithmetic wants.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Callable, Mapping

Value = int | float | bool
Env = Mapping[str, Value]


class ExprError(ValueError):
    """A template cannot be parsed or evaluated; the message says why."""


_BINOPS: dict[type, Callable[[Value, Value], Value]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Div: operator.truediv,
}
_CMPOPS: dict[type, Callable[[Value, Value], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCS: dict[str, Callable[..., Value]] = {"min": min, "max": max, "abs": abs}

Evaluator = Callable[[Env], Value]


@dataclass(frozen=True)
class Expr:
    """A parsed expression: its text, the variables it reads, and a closure."""

    text: str
    names: frozenset[str]
    _run: Evaluator = field(compare=False)  # the same text reads the same
    cost: int = field(default=1, compare=False)  # syntax nodes: the work of one evaluation

    def __call__(self, env: Env) -> Value:
        try:
            return self._run(env)
        except ZeroDivisionError:
            raise ExprError(f"division by zero in '{self.text}' with {_show_env(env, self.names)}") from None

    def int(self, env: Env) -> int:
        value = self(env)
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ExprError(f"'{self.text}' must be a whole number, got {value!r} with {_show_env(env, self.names)}")
        return value

    def bool(self, env: Env) -> bool:
        return bool(self(env))

    def __reduce__(self):
        # The closure cannot be pickled; the text parses back to the same
        # expression (an Instance goes to every rank of a run so).
        return (parse, (self.text, self.names))


def _show_env(env: Env, names: frozenset[str]) -> str:
    return ", ".join(f"{n}={env[n]}" for n in sorted(names) if n in env) or "no variables"


# Bounds on one expression, checked before it is compiled: index arithmetic
# is a handful of nodes (``(r + 1) % R`` is 5). A longer one is refused:
# compiling recurses per level (3,000 terms raised RecursionError), and it is
# evaluated once per loop iteration (the loader weighs its loops by cost).
MAX_EXPR_CHARS = 1024
MAX_EXPR_NODES = 200


def parse(text: str | int, allowed_names: frozenset[str] | set[str]) -> Expr:
    """Parse ``text`` into an :class:`Expr` that may read only ``allowed_names``."""
    source = str(text).strip()
    if not source:
        raise ExprError("empty expression")
    if len(source) > MAX_EXPR_CHARS:
        raise ExprError(f"an expression of {len(source)} characters (at most {MAX_EXPR_CHARS}): '{source[:40]}...'")
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ExprError(f"cannot parse '{source[:60]}': {getattr(exc, 'msg', None) or exc}") from None
    operators = (ast.expr_context, ast.operator, ast.cmpop, ast.boolop, ast.unaryop)  # parts of a node, not nodes
    cost = sum(1 for node in ast.walk(tree.body) if not isinstance(node, operators))
    if cost > MAX_EXPR_NODES:
        raise ExprError(f"'{source[:40]}...' has {cost} terms (at most {MAX_EXPR_NODES})")
    names: set[str] = set()
    run = _compile(tree.body, source, frozenset(allowed_names), names)
    return Expr(source, frozenset(names), run, cost)


def _compile(node: ast.AST, source: str, allowed: frozenset[str], names: set[str]) -> Evaluator:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"only numbers are allowed as constants in '{source}', not {node.value!r}")
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        if node.id not in allowed:
            known = ", ".join(sorted(allowed))
            raise ExprError(f"unknown name '{node.id}' in '{source}' (known: {known})")
        name = node.id
        names.add(name)
        return lambda env: env[name]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        fn = _BINOPS[type(node.op)]
        left = _compile(node.left, source, allowed, names)
        right = _compile(node.right, source, allowed, names)
        return lambda env: fn(left(env), right(env))
    if isinstance(node, ast.UnaryOp):
        operand = _compile(node.operand, source, allowed, names)
        if isinstance(node.op, ast.USub):
            return lambda env: -operand(env)
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(node.op, ast.Not):
            return lambda env: not operand(env)
    if isinstance(node, ast.BoolOp):
        parts = [_compile(v, source, allowed, names) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda env: all(p(env) for p in parts)
        return lambda env: any(p(env) for p in parts)
    if isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
        first = _compile(node.left, source, allowed, names)
        rest = [(_CMPOPS[type(op)], _compile(c, source, allowed, names)) for op, c in zip(node.ops, node.comparators)]

        def compare(env: Env) -> bool:
            left = first(env)
            for fn, right_fn in rest:
                right = right_fn(env)
                if not fn(left, right):
                    return False
                left = right
            return True

        return compare
    if isinstance(node, ast.IfExp):
        test = _compile(node.test, source, allowed, names)
        yes = _compile(node.body, source, allowed, names)
        no = _compile(node.orelse, source, allowed, names)
        return lambda env: yes(env) if test(env) else no(env)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
        and node.args
    ):
        fn = _FUNCS[node.func.id]
        args = [_compile(a, source, allowed, names) for a in node.args]
        return lambda env: fn(*(a(env) for a in args))
    raise ExprError(f"'{ast.unparse(node)}' is not allowed in '{source}' (use numbers, names, + - * // % /, "
                    f"comparisons, and/or/not, min/max/abs)")
