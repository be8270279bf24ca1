"""The YAML loader's bounds (audit 26, F5): nesting and the node count with
aliases expanded are checked while the document is composed, so a file far
past a bound is refused at the bound, not after a parse of all of it (a 1 MB
flow list took 15 s before its refusal). Each bound is checked with libyaml's
events (the default, where PyYAML has libyaml) and with PyYAML's own."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from purlin_bench.base import yamlfile
from purlin_bench.base.yamlfile import MAX_DEPTH, MAX_NODES, load_yaml_text, read_yaml
from purlin_bench.spec.loader import builtin_spec_paths
from purlin_bench.tools.tune.sweep import builtin_sweep_paths

LOADERS = {"default": yamlfile._BoundedLoader, "pure-python": yamlfile._loader(yamlfile._PyEvents)}


class Bad(Exception):
    pass


@pytest.fixture(params=list(LOADERS))
def composed(request, monkeypatch) -> list[int]:
    """Use one loader, and count the nodes it composes (one per compose_node call)."""
    cls = LOADERS[request.param]
    monkeypatch.setattr(yamlfile, "_BoundedLoader", cls)
    calls: list[int] = []
    original = cls.compose_node

    def counting(self, parent, index):
        calls.append(1)
        return original(self, parent, index)

    monkeypatch.setattr(cls, "compose_node", counting)
    return calls


def refusal(text: str) -> str:
    with pytest.raises(Bad) as info:
        load_yaml_text(text, "f.yaml", Bad)
    return str(info.value)


@pytest.mark.parametrize(
    "text",
    ["name: x\ndescription: [" + "1," * 20_000 + "1]\n", "".join(f"k{i}: 1\n" for i in range(20_000))],
    ids=["flow-list", "many-keys"],
)
def test_a_document_past_the_node_bound_is_refused_at_the_bound(monkeypatch, composed, text):
    monkeypatch.setattr(yamlfile, "MAX_NODES", 1000)
    assert refusal(text) == "f.yaml: refused YAML: more than 1000 values once its aliases are expanded"
    assert len(composed) <= 1001  # not the 20,000 a parse of the whole document composes


@pytest.mark.parametrize(
    ("text", "size"),
    [("[&a [1, 2, 3], *a, *a]", 13), ("{a: &x {k: v}, b: *x}", 9), ("[&a [&b [1], *b], *a, *b]", 13)],
)
def test_the_count_is_every_value_and_key_with_aliases_expanded(monkeypatch, composed, text, size):
    monkeypatch.setattr(yamlfile, "MAX_NODES", size)
    assert load_yaml_text(text, "f.yaml", Bad) == yaml.safe_load(text)
    monkeypatch.setattr(yamlfile, "MAX_NODES", size - 1)
    assert refusal(text).endswith(f"more than {size - 1} values once its aliases are expanded")


def test_an_alias_bomb_is_refused_without_expanding_it(composed):
    # Nine levels of nine aliases: 9**10 values for whoever walks them, 91 nodes in the text.
    text = "a0: &a0 [" + ",".join(["x"] * 9) + "]\n"
    text += "".join(f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))
    assert refusal(text) == f"f.yaml: refused YAML: more than {MAX_NODES} values once its aliases are expanded"
    assert len(composed) < 200


@pytest.mark.parametrize("text", ["&a [*a]", "&a {k: [1, *a]}"])
def test_an_alias_inside_its_own_anchor_is_refused(composed, text):
    assert refusal(text).endswith("values once its aliases are expanded")


def test_an_undefined_alias_or_a_second_anchor_of_one_name_is_malformed(composed):
    assert refusal("a: *b\n") == "f.yaml: malformed YAML at line 1, column 4: found undefined alias 'b'"
    assert refusal("- &a x\n- &a y\n").startswith("f.yaml: malformed YAML at line 2, column 3")


@pytest.mark.parametrize(
    "text",
    ["name: " + "[" * 5000 + "]" * 5000 + "\n", "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 2)) + "x\n"],
    ids=["flow", "block"],
)
def test_deep_nesting_is_refused_by_either_parser(composed, text):
    assert refusal(text).startswith(f"f.yaml: refused YAML: nested more than {MAX_DEPTH} levels deep at line ")


def test_a_long_number_is_refused_before_it_is_converted(composed):
    assert refusal("a: [1, 0x" + "f" * 50 + "]\n") == (
        "f.yaml: refused YAML: a number of 51 digits (at most 40) at line 1, column 8"
    )


@pytest.mark.parametrize(
    "path", [*builtin_spec_paths().values(), *builtin_sweep_paths().values()], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_every_builtin_loads_as_pyyaml_loads_it(composed, path):
    text = path.read_text()
    assert load_yaml_text(text, path, Bad) == yaml.safe_load(text)
    assert composed


def test_the_default_loader_reads_events_from_libyaml_where_pyyaml_has_it():
    if not yaml.__with_libyaml__:
        pytest.skip("this PyYAML is built without libyaml: the pure-Python scanner is the only one")
    # The pure-Python scanner takes about 1.3 s per MB of one scalar, before any bound can act.
    assert issubclass(yamlfile._BoundedLoader, yaml.cyaml.CParser)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("description: [" + "1," * 500_000 + "1]\n", "more than 100000 values"),
        ("description: [" + "1," * 5_000_000 + "1]\n", "more than 100000 values"),
        ("".join(f"k{i}: 1\n" for i in range(200_000)), "more than 100000 values"),
        ('description: "' + "a " * (7 << 20) + '"\n', None),
    ],
    ids=["1MB-list", "10MB-list", "200k-keys", "14MB-string"],
)
def test_the_audits_files_are_read_in_seconds(tmp_path: Path, body, fragment):
    """Audit 26's files, under the 16 MiB cap: 15 s, 60+ s, 10 s and 18 s
    before. The bound is coarse (a slow CI machine); the tests above say why."""
    if not yaml.__with_libyaml__:
        pytest.skip("without libyaml the pure-Python scanner reads a 14 MB scalar whole first (about 18 s)")
    path = tmp_path / "s.yaml"
    path.write_text("name: my-v\nop: copy\ncount: variable\ninput: [c(r)]\noutput: [c((r-1)%R)]\n" + body)
    start = time.perf_counter()
    if fragment is None:
        assert len(read_yaml(path, Bad)["description"]) == 14 << 20
    else:
        with pytest.raises(Bad, match=fragment):
            read_yaml(path, Bad)
    assert time.perf_counter() - start < 5
