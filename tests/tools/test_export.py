"""Every export format: JSON valid against the published schema, CSV rows,
and a C/C++ header that compiles (and whose lookup agrees with ours)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from purlin_bench.base.config import RunConfig
from purlin_bench.tools.export import ExportError, formats, render
from purlin_bench.backends import detect
from purlin_bench.plans import ArtifactError, PlanArtifact, PlanEntry, SweepRef, parse_plan

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "plan.schema.json").read_text())


def make_plan(entries=None, collective="all-reduce", backend="numpy") -> PlanArtifact:
    default_entries = (
        PlanEntry(
            8,
            65535,
            16,
            RunConfig.make("two-shot", {"channels": 1, "slice_bytes": 0}),
            10.5,
            0.0016,
            12.5,
            None,
            5,
            "s8",
        ),
        PlanEntry(
            65536,
            (1 << 20) - 1,
            65536,
            RunConfig.make(
                "ring",
                {"channels": 2, "slice_bytes": 262144},
                {"datapath": "sm", "blocks": 4, "threads": 512, "unroll": 2},
            ),
            20.0,
            4.9,
            30.0,
            40.0,
            5,
            "s64K",
        ),
        PlanEntry(
            1 << 20,
            None,
            1 << 20,
            RunConfig.make("direct", {"channels": 4, "slice_bytes": 0}, {"datapath": "ce"}),
            80.0,
            19.6,
            80.0,
            None,
            5,
            "s1M",
        ),
    )
    return PlanArtifact(
        collective,
        "float32",
        8,
        backend,
        detect("numpy", 8),
        "0.1.0",
        "2026-12-02T10:00:00+00:00",
        SweepRef("quick", "0123456789ab", "tpe", 5, 0),
        entries or default_entries,
        redop="sum",
    )


def published_schema_errors(data: Any) -> list[str]:
    """What another tool, reading only docs/plan.schema.json, finds wrong."""
    return [e.message for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(data)]


def test_the_published_schema_catches_violations():
    good = json.loads(render(make_plan(), "json", "p.json"))
    assert published_schema_errors(good) == []
    for mutate in (
        lambda d: d.pop("fingerprint"),
        lambda d: d.update(ranks=0),
        lambda d: d.update(timing="fast"),
        lambda d: d["entries"][0].update(time_us=-1),
        lambda d: d["entries"][0]["config"]["plan_params"].update(channels=[1]),
        lambda d: d["entries"][0]["config"].update(strategy="nccl"),
        lambda d: d.update(entries=[]),
        lambda d: d["fingerprint"].update(layout="eight"),
        lambda d: d.update(surprise=1),
    ):
        bad = json.loads(json.dumps(good))
        mutate(bad)
        assert published_schema_errors(bad), mutate


# --------------------------------------------------------------- formats


def test_registry():
    assert formats() == ["json", "csv", "header"]
    with pytest.raises(ExportError, match="unknown export format 'yaml'"):
        render(make_plan(), "yaml", "p.json")


@pytest.mark.parametrize("plan", [make_plan(), make_plan(backend="cupy")], ids=["numpy", "cupy"])
def test_json_export_validates_against_the_published_schema(plan):
    data = json.loads(render(plan, "json", "p.json"))
    assert published_schema_errors(data) == []
    assert data == plan.to_dict() and parse_plan(data, "p.json") == plan


def test_json_export_refuses_what_would_not_load():
    nan = replace(make_plan(), entries=(replace(make_plan().entries[0], time_us=float("nan")),))
    with pytest.raises(ArtifactError, match=r"^p\.json: entries\[0\]\.time_us: nan is not a finite positive number$"):
        render(nan, "json", "p.json")


def test_csv_has_one_row_per_bucket():
    rows = list(csv.DictReader(io.StringIO(render(make_plan(), "csv", "p.json"))))
    assert [r["min_bytes"] for r in rows] == ["8", "65536", "1048576"]
    assert [r["max_bytes"] for r in rows] == ["65535", "1048575", ""]
    assert [r["strategy"] for r in rows] == ["two-shot", "ring", "direct"]
    assert rows[1]["slice_bytes"] == "262144" and rows[1]["blocks"] == "4" and rows[1]["datapath"] == "sm"
    assert rows[0]["blocks"] == "" and rows[0]["timing"] == "cpu-reference"
    assert rows[1]["speedup_vs_default"] == "1.5" and rows[1]["speedup_vs_baseline"] == "2"
    odd = replace(
        make_plan(),
        entries=(replace(make_plan().entries[0], config=RunConfig.make("push", {"channels": 1}, {"prefetch": 2})),),
    )
    assert list(csv.DictReader(io.StringIO(render(odd, "csv", "p.json"))))[0]["other_params"] == "prefetch=2"


def _compilers() -> list[tuple[str, str]]:
    found = [(c, lang) for c, lang in (("gcc", "c"), ("g++", "c++")) if shutil.which(c)]
    if not found:
        pytest.skip("no C or C++ compiler on PATH")
    return found


def test_header_compiles_in_c_and_cpp(tmp_path):
    header = tmp_path / "plan.h"
    header.write_text(render(make_plan(), "header", "results/cpu/all-reduce-8vr-float32.json"))
    other = tmp_path / "other.h"  # two plans in one translation unit share the entry type
    other.write_text(render(make_plan(collective="all-gather"), "header", "x.json"))
    source = tmp_path / "use.c"
    source.write_text(
        '#include "plan.h"\n#include "other.h"\n'
        'int main(void) { return purlin_plan_all_reduce_8vr_float32_lookup(100)->channels == 1 ? 0 : 1; }\n'
    )
    for compiler, lang in _compilers():
        flags = ["-std=c99"] if lang == "c" else ["-std=c++11"]
        result = subprocess.run(
            [compiler, "-x", lang, *flags, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", str(source)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr


def test_header_lookup_agrees_with_the_plan(tmp_path):
    compilers = [c for c, lang in _compilers() if lang == "c"]
    if not compilers:
        pytest.skip("no C compiler")
    plan = make_plan()
    (tmp_path / "plan.h").write_text(render(plan, "header", "p.json"))
    sizes = [0, 8, 65535, 65536, 1 << 20, 1 << 40]
    body = "".join(
        f'  e = purlin_plan_all_reduce_8vr_float32_lookup({n}ull);'
        f' printf("%llu %s %d %lld %d %s\\n", (unsigned long long)e->min_bytes, e->strategy, e->channels,'
        f' (long long)e->slice_bytes, e->blocks, e->datapath ? e->datapath : "-");\n'
        for n in sizes
    )
    (tmp_path / "main.c").write_text(
        f'#include <stdio.h>\n#include "plan.h"\nint main(void) {{\n  const purlin_plan_entry *e;\n'
        f'{body}  return purlin_plan_all_reduce_8vr_float32[2].max_bytes == UINT64_MAX ? 0 : 1;\n}}\n'
    )
    subprocess.run([compilers[0], "-std=c99", "-o", "lookup", "main.c"], cwd=tmp_path, check=True)
    lines = subprocess.run([str(tmp_path / "lookup")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines == [
        "8 two-shot 1 0 -1 -",
        "8 two-shot 1 0 -1 -",
        "8 two-shot 1 0 -1 -",
        "65536 ring 2 262144 4 sm",
        "1048576 direct 4 0 -1 ce",
        "1048576 direct 4 0 -1 ce",
    ]


def test_header_escapes_strings():
    # a string parameter is the one free text a valid plan carries into the table
    odd = make_plan(
        (
            PlanEntry(
                8,
                None,
                8,
                RunConfig.make("ring", {"channels": 1}, {"datapath": 'we"ird\\'}),
                1.0,
                1.0,
                None,
                None,
                1,
                "s",
            ),
        )
    )
    text = render(odd, "header", "p.json")
    assert '"we\\042ird\\134"' in text
