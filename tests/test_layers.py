"""The package's layers point down, and nothing above the backends names one.

Layers, lowest first (README, "Project layout"): a module may import its own
layer and the ones below, never one above. Read from the source with ``ast``,
so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "purlin_bench"

# Each module path (dotted, under purlin_bench) by its first matching prefix.
LAYERS = (
    ("base", ("errors", "dtypes", "sizes", "config", "resources", "yamlfile", "timing", "hardware", "atomic", "inputs", "textfile", "dist")),
    ("specs", ("spec",)),
    ("programs", ("program", "strategies", "planner", "heuristics", "check", "roofline")),
    ("backends", ("backends",)),
    ("measurement", ("measurement", "planfile")),
    ("tools", ("bench", "tune", "export", "plans", "torch")),
    # The package's front (purlin_bench.load_plan, python -m purlin_bench).
    ("cli", ("cli", "__init__", "__main__")),
)
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str:
    head = module.split(".")
    for name, prefixes in LAYERS:
        if head[0] in prefixes:
            return name
    raise AssertionError(f"purlin_bench.{module} is in no layer: add it to LAYERS (and README)")


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        out.append((".".join(rel.parts), path))
    return out


def imported(path: Path, module: str) -> set[str]:
    """purlin_bench modules that ``path`` imports, relative to the package."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {n.removeprefix("purlin_bench.") for n in names if n.startswith("purlin_bench.")}


@pytest.mark.parametrize(("module", "path"), modules(), ids=lambda x: x if isinstance(x, str) else "")
def test_no_module_imports_a_layer_above_its_own(module, path):
    mine = layer_of(module)
    above = sorted(m for m in imported(path, module) if RANK[layer_of(m)] > RANK[mine])
    assert not above, f"purlin_bench.{module} ({mine}) imports {above}, a layer above it"


def test_only_the_backends_name_a_backend():
    """The issue's own check: a backend's name in quotes appears only in its
    folder and the registry (purlin_bench/backends/)."""
    quoted = re.compile(r"""['"](numpy|cupy|fake)['"]""")
    hits = [f"{path.relative_to(PACKAGE)}:{n}" for module, path in modules() if layer_of(module) != "backends" for n, line in enumerate(path.read_text().splitlines(), 1) if quoted.search(line)]
    assert not hits, hits


def test_no_module_is_over_500_lines():
    long = {str(path.relative_to(PACKAGE)): n for _, path in modules() if (n := len(path.read_text().splitlines())) > 500}
    assert not long, long


def test_every_backend_folder_is_registered_and_imports_without_its_library():
    from purlin_bench.backends import backend_class, names

    folders = {p.name for p in (PACKAGE / "backends").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(names())
    for name in names():
        cls = backend_class(name)
        assert cls.name == name and (cls.available() is None or isinstance(cls.available(), str))
