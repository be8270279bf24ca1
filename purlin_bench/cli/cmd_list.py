"""``purlin list``: the collectives, their semantics, and the strategies that run them."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich.table import Table

from purlin_bench.cli.common import console
from purlin_bench.spec.loader import LOAD_CHECK_RANKS, CollectiveSpec, load_all_builtin, load_spec_file
from purlin_bench.strategies import STRATEGIES

ORDER = 10
# Rank count at which applicability is shown: a typical scale-up node.
PROBE_RANKS = 8


def probe_ranks(spec: CollectiveSpec) -> int | None:
    """PROBE_RANKS, or the largest rank count the spec allows below it."""
    allowed = [r for r in LOAD_CHECK_RANKS if r <= PROBE_RANKS and spec.supports_ranks(r)]
    if PROBE_RANKS in allowed:
        return PROBE_RANKS
    return max(allowed, default=None)


def describe(spec: CollectiveSpec) -> dict[str, Any]:
    """Everything ``purlin list --json`` says about one collective."""
    ranks = probe_ranks(spec)
    return {
        "name": spec.name,
        "description": spec.description,
        "op": spec.op,
        "reduce": spec.redop,
        "rooted": spec.rooted,
        "count": spec.count_mode,
        "requires": spec.requires.text if spec.requires else None,
        "bench": {"size": spec.bench.size_elements.text, "busbw": spec.bench.busbw_factor.text},
        "source": spec.source,
        "probed_ranks": ranks,
        # Every strategy runs any dataflow; only a spec that allows no rank count has none.
        "strategies": list(STRATEGIES) if ranks is not None else [],
    }


def _op_text(entry: dict[str, Any]) -> str:
    return f"reduce ({entry['reduce']})" if entry["op"] == "reduce" else entry["op"]


def table(entries: list[dict[str, Any]]) -> Table:
    out = Table(title=f"collectives (strategies as they apply at {PROBE_RANKS} ranks)", title_justify="left")
    for name in ("collective", "op", "rooted", "count", "strategies", "description"):
        out.add_column(name, overflow="fold")
    for e in entries:
        out.add_row(
            e["name"],
            _op_text(e),
            "yes" if e["rooted"] else "no",
            e["count"],
            ", ".join(e["strategies"]) or "-",
            e["description"],
        )
    return out


def list_collectives(
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON to stdout."),
    spec_files: Optional[list[str]] = typer.Option(None, "--spec", help="Also list a user's spec (.yaml); repeatable."),
) -> None:
    """List the built-in collectives (and --spec files): op, rootedness, how a
    count maps to chunks, and the strategies that run it."""
    specs = load_all_builtin() + [load_spec_file(path) for path in spec_files or []]
    entries = [describe(spec) for spec in specs]
    if as_json:
        print(json.dumps(entries, indent=2))
        return
    console.print(table(entries))


def register(app: typer.Typer) -> None:
    app.command("list")(list_collectives)
