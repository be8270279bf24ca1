"""The package's layers point down, and nothing above the backends names one.

Layers, lowest first (README, "Project layout"): a module may import its own
layer and the ones below, never one above. Read from the source with ``ast``,
so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "purlin_bench"

# Each layer is folders (or a module) under purlin_bench, lowest first; a module
# belongs to the layer of its longest matching dotted prefix.
LAYERS = (
    # procs/: one process per rank (store, group, shared memory, launcher), which backends use.
    ("base", ("base", "procs")),
    ("specs", ("spec",)),
    ("programs", ("program", "strategies")),
    # The baselines registry sits with the backends: each baseline is one of theirs.
    ("backends", ("backends", "baselines")),
    ("measurement", ("measure", "plans")),
    # plans.load (purlin_bench.load_plan) runs what it loads: a tool over the plan file.
    ("tools", ("tools", "plans.load", "torch")),
    # The package's front (purlin_bench.load_plan, python -m purlin_bench).
    ("cli", ("cli", "__init__", "__main__")),
)
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        head = ".".join(parts[:n])
        for name, prefixes in LAYERS:
            if head in prefixes:
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
    hits = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for module, path in modules()
        if layer_of(module) != "backends"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if quoted.search(line)
    ]
    assert not hits, hits


def test_no_module_is_over_500_lines():
    long = {
        str(path.relative_to(PACKAGE)): n for _, path in modules() if (n := len(path.read_text().splitlines())) > 500
    }
    assert not long, long


def test_every_backend_folder_is_registered_and_imports_without_its_library():
    from purlin_bench.backends import backend_class, names

    folders = {p.name for p in (PACKAGE / "backends").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(names())
    for name in names():
        cls = backend_class(name)
        assert cls.name == name and (cls.available() is None or isinstance(cls.available(), str))


# --- Wider guard rails (issue 28, item 1) -------------------------------------

ROOT = PACKAGE.parent
TESTS = ROOT / "tests"

# Where a device library may be imported: CuPy only by the backends (the GPU
# backend and its baselines' code live in backends/cupy/; the baselines
# registry, purlin_bench/baselines/, imports none); torch by them and by the
# torch communicator, which reaches the GPU only through the port's
# StreamRunner (issue 28: it imported CuPy and called past the port).
DEVICE_HOMES = {"cupy": ("backends",), "torch": ("backends", "torch")}
# One narrow exception, by module and library: the torchrun launcher joins
# torch.distributed's rendezvous (gloo, CPU only) to exchange a few bytes;
# it runs no device code. Kept visible here so a new one is a decision.
DEVICE_EXCEPTIONS = {("procs.env", "torch.distributed")}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_device_libraries_are_imported_only_where_they_belong():
    hits = [
        f"purlin_bench/{path.relative_to(PACKAGE)} imports {name}"
        for module, path in modules()
        for name in sorted(_imports(path))
        if name.split(".")[0] in DEVICE_HOMES
        and module.split(".")[0] not in DEVICE_HOMES[name.split(".")[0]]
        and (module, name) not in DEVICE_EXCEPTIONS
    ]
    assert not hits, hits


def _lab_modules() -> set[str]:
    """Names a module of lab/ is imported by, with lab/ or lab/scripts/ on sys.path."""
    lab = ROOT / "lab"
    return {"lab", "scripts"} | {p.stem for p in lab.glob("*.py")} | {p.stem for p in (lab / "scripts").glob("*.py")}


@pytest.mark.parametrize("tree", ["purlin_bench", "tests"])
def test_nothing_in_the_product_imports_the_lab(tree):
    """The lab (experiments, runbook, raw logs) is not the product: neither the
    package nor its tests import a lab script or put lab/ on sys.path."""
    lab = _lab_modules()
    hits = []
    for path in sorted((ROOT / tree).rglob("*.py")):
        hits += [
            f"{path.relative_to(ROOT)} imports {name}" for name in sorted(_imports(path)) if name.split(".")[0] in lab
        ]
        text = path.read_text()
        hits += [
            f"{path.relative_to(ROOT)}: {m.group(0)}"
            for m in re.finditer(r"sys\.path\.\w+\(.*\b(lab|scripts)\b.*", text)
        ]
    assert not hits, hits


# A repository path in the package's text: one of these folders, then a path.
REPO_PATH = re.compile(r"\b((?:docs|scripts|atoms|purlin_bench|lab)/[A-Za-z0-9_./*-]*)")


def named_paths() -> list[tuple[str, str]]:
    """(file:line, path) for every repository path the package's source names."""
    out = []
    for _, path in modules():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            out += [
                (f"purlin_bench/{path.relative_to(PACKAGE)}:{n}", m.group(1).rstrip(".,:;"))
                for m in REPO_PATH.finditer(line)
            ]
    return out


def _exists(named: str) -> bool:
    return any(ROOT.glob(named)) if "*" in named else (ROOT / named).exists()


def test_the_path_check_sees_paths_and_globs():
    assert _exists("atoms/*.cu") and _exists("docs/plan.schema.json") and not _exists("docs/nothing-here.md")
    assert REPO_PATH.findall("see docs/perf/issue16/build-time.log, and atoms/snac.cu.") == [
        "docs/perf/issue16/build-time.log",
        "atoms/snac.cu.",
    ]


def test_every_path_the_package_names_exists_and_is_not_the_lab():
    """A comment or docstring that names a file names one that exists, and
    never the lab: code cites a decision id (docs/decisions.md), not a log."""
    bad = [f"{where}: {named}" for where, named in named_paths() if not _exists(named) or named.startswith("lab/")]
    assert not bad, bad


def test_every_package_relative_path_the_package_names_exists():
    """``backends/cupy/baselines/nccl.py``, ``spec/variable.py``: a path written from
    inside the package (one of its folders, then a path) names a file there."""
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__"))
    inner = re.compile(r"(?<![\w/.-])((?:%s)/[A-Za-z0-9_./*-]*[A-Za-z0-9_*])" % "|".join(folders))
    bad = []
    for _, path in modules():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in inner.finditer(line):
                named = m.group(1)
                found = any(PACKAGE.glob(named)) if "*" in named else (PACKAGE / named).exists()
                if not found:
                    bad.append(f"purlin_bench/{path.relative_to(PACKAGE)}:{n}: {named}")
    assert not bad, bad


# --- The README's picture of the package, generated from the tree -----------------

LAYOUT_BEGIN = (
    "<!-- layers: generated from the tree by tests/unit/test_layers.py (PURLIN_UPDATE_GOLDEN=1 rewrites it) -->"
)
LAYOUT_END = "<!-- /layers -->"


def _summary(path: Path) -> str:
    """The first line of a module's docstring: what the folder or file is."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    line = doc.strip().splitlines()[0] if doc.strip() else ""
    assert line and len(line) <= 100, (
        f"{path.relative_to(ROOT)}: its docstring's first line says what it is, in 100 characters"
    )
    return line


def layout_block() -> str:
    """Each layer, lowest first, with its folders and what each one's
    ``__init__`` says it is; a tools-layer folder lists its tools too."""
    rows = []
    for n, (name, prefixes) in enumerate(LAYERS, 1):
        label = f"{n} {name}"
        for prefix in prefixes:
            rel = Path(*prefix.split("."))
            if (PACKAGE / rel).is_dir():
                rows.append((label, f"purlin_bench/{rel}/", _summary(PACKAGE / rel / "__init__.py")))
                children = sorted(p for p in (PACKAGE / rel).iterdir() if (p / "__init__.py").exists())
                if name == "tools":
                    children = sorted(children + [p for p in (PACKAGE / rel).glob("[a-z]*.py")])
                for child in children:
                    text = child / "__init__.py" if child.is_dir() else child
                    rows.append(("", f"  {child.name}{'/' if child.is_dir() else ''}", _summary(text)))
                    grandchildren = child.iterdir() if child.is_dir() else ()
                    for grandchild in sorted(p for p in grandchildren if (p / "__init__.py").exists()):
                        rows.append(("", f"    {grandchild.name}/", _summary(grandchild / "__init__.py")))
            elif (PACKAGE / rel).with_suffix(".py").exists():
                path = (PACKAGE / rel).with_suffix(".py")
                rows.append((label, f"purlin_bench/{path.relative_to(PACKAGE)}", _summary(path)))
            label = ""
    lines = [f"{a:<14} {b:<28} {c}".rstrip() for a, b, c in rows]
    return "\n".join([LAYOUT_BEGIN, "```", *lines, "```", LAYOUT_END])


def test_readme_layout_is_the_tree():
    """The README's layer picture is generated from LAYERS and the folders'
    docstrings: a new folder or layer shows up there, or this fails."""
    readme = ROOT / "README.md"
    text = readme.read_text()
    assert LAYOUT_BEGIN in text and LAYOUT_END in text, "README.md lost its generated layers block"
    head, rest = text.split(LAYOUT_BEGIN, 1)
    tail = rest.split(LAYOUT_END, 1)[1]
    want = head + layout_block() + tail
    if os.environ.get("PURLIN_UPDATE_GOLDEN") == "1":
        readme.write_text(want)
    assert text == want, "README.md's layers block is stale: PURLIN_UPDATE_GOLDEN=1 pytest tests/unit/test_layers.py"


def test_every_package_folder_is_in_a_layer():
    for path in PACKAGE.iterdir():
        if (path / "__init__.py").exists():
            layer_of(path.name)  # raises naming it when it is in none
