"""Sweeps as data: loading, bucket math, the define-by-run space, and every
kind of bad input (one SweepError naming the file and the field)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from purlin_bench.base.config import RunConfig
from purlin_bench.tools.tune.space import Condition, ParamSpace, Space
from purlin_bench.tools.tune.sweep import (
    Bucket,
    SweepError,
    buckets_from_sizes,
    builtin_sweep_paths,
    load_sweep_file,
    parse_sweep,
    resolve_sweep,
)

GOOD = {
    "name": "t",
    "sizes": [8, "64K", "1M"],
    "dtypes": ["float32", "bf16"],
    "ranks": [4, 8],
    "trials": 5,
    "space": {
        "strategy": ["direct", "ring"],
        "params": {
            "channels": [1, 2],
            "slice_bytes": {"values": [0, "64K"], "when": {"strategy": "ring"}},
            "datapath": ["sm", "ce"],
            "blocks": {"values": [0, 4], "when": {"datapath": "sm"}},
        },
    },
}


class FakeTrial:
    """Optuna's suggest_categorical, answering from a script (first choice otherwise)."""

    def __init__(self, answers: dict | None = None):
        self.answers = dict(answers or {})
        self.params: dict = {}

    def suggest_categorical(self, name, choices):
        value = self.answers.get(name, choices[0])
        assert value in choices
        self.params[name] = value
        return value


def with_space(**params) -> dict:
    raw = {**GOOD, "space": {**GOOD["space"], "params": params}}
    return raw


def test_builtin_sweeps_load_and_differ():
    paths = builtin_sweep_paths()
    assert {"quick", "default"} <= set(paths)
    quick, default = resolve_sweep("quick"), resolve_sweep("default")
    assert quick.space.size() < default.space.size()
    assert quick.buckets[0].min_bytes == 8 and default.buckets[-1].max_bytes is None
    assert quick.digest != default.digest


def test_parse_good_sweep_and_buckets():
    sweep = parse_sweep(GOOD, "t.yaml")
    assert [(b.min_bytes, b.max_bytes) for b in sweep.buckets] == [(8, 65535), (65536, (1 << 20) - 1), (1 << 20, None)]
    assert sweep.dtypes == ("float32", "bfloat16")  # aliases resolved
    assert sweep.ranks == (4, 8) and sweep.trials == 5
    assert [p.name for p in sweep.space.params] == ["channels", "slice_bytes", "datapath", "blocks"]
    assert [p.kind for p in sweep.space.params] == ["plan", "plan", "exec", "exec"]
    assert sweep.space.params[1].values == (0, 65536)
    assert Bucket(8, 65535).contains(65535) and not Bucket(8, 65535).contains(65536)
    assert Bucket(1 << 20, None).contains(1 << 40)


def test_digest_ignores_comments_but_not_the_space(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("# a comment\n" + yaml.safe_dump(GOOD, sort_keys=False))
    b = tmp_path / "b.yaml"
    b.write_text(yaml.safe_dump(GOOD, sort_keys=False))
    assert load_sweep_file(a).digest == load_sweep_file(b).digest
    changed = with_space(channels=[1, 2, 4])
    assert parse_sweep(changed, "c").space_digest != parse_sweep(GOOD, "g").space_digest
    # Sizes and trials do not change the space: studies resume across them.
    assert parse_sweep({**GOOD, "sizes": [8], "trials": 9}, "x").space_digest == parse_sweep(GOOD, "g").space_digest


def test_sizes_override_and_cap():
    sweep = parse_sweep(GOOD, "t")
    assert [b.min_bytes for b in sweep.with_sizes([16, 1024]).buckets] == [16, 1024]
    # GOOD's buckets: [8, 64K), [64K, 1M), [1M, inf). A cap keeps those that
    # end at or below it; the unbounded one ends at its only probe, its lower edge.
    assert [b.min_bytes for b in sweep.capped(65536).buckets] == [8]
    assert [b.min_bytes for b in sweep.capped((1 << 20) - 1).buckets] == [8]
    assert [b.min_bytes for b in sweep.capped(1 << 20).buckets] == [8, 65536, 1 << 20]
    assert sweep.capped(65535).buckets == ()


def test_sweep_files_read_sizes_with_the_cli_grammar():
    raw = {
        **GOOD,
        "sizes": [8, "64kib", "1.5M", "2T"],
        "space": {
            **GOOD["space"],
            "params": {
                "slice_bytes": {"values": [0, "0.5K", "1MB"], "when": {"strategy": "ring"}},
                "channels": {"values": [1], "when": {"slice_bytes": "512B"}},
            },
        },
    }
    sweep = parse_sweep(raw, "t")
    assert [b.min_bytes for b in sweep.buckets] == [8, 65536, 3 << 19, 2 << 40]
    assert sweep.space.params[0].values == (0, 512, 1 << 20)
    assert sweep.space.params[1].when == Condition((("slice_bytes", (512,)),))


def test_define_by_run_follows_conditions():
    space = parse_sweep(GOOD, "t").space
    ring_sm = FakeTrial({"strategy": "ring", "channels": 2, "slice_bytes": 65536, "datapath": "sm", "blocks": 4})
    assert space.suggest(ring_sm, {}) == RunConfig.make(
        "ring", {"channels": 2, "slice_bytes": 65536}, {"datapath": "sm", "blocks": 4}
    )
    direct_ce = FakeTrial({"strategy": "direct", "datapath": "ce"})
    config = space.suggest(direct_ce, {})
    assert "slice_bytes" not in direct_ce.params and "blocks" not in direct_ce.params
    assert config == RunConfig.make("direct", {"channels": 1}, {"datapath": "ce"})
    # direct: 2 channels x (sm: 2 blocks + ce) = 6; ring: 2 x 2 slices x 3 = 12
    assert space.size() == 18


def test_params_of_maps_a_config_back_to_trial_params():
    space = parse_sweep(GOOD, "t").space
    config = RunConfig.make("ring", {"channels": 2, "slice_bytes": 65536}, {"datapath": "ce", "blocks": 4})
    assert space.params_of(config, {}) == {"strategy": "ring", "channels": 2, "slice_bytes": 65536, "datapath": "ce"}
    # Values outside the choices are left for the sampler (the config still runs verbatim).
    odd = RunConfig.make("ring", {"channels": 3, "slice_bytes": 0})
    assert space.params_of(odd, {}) == {"strategy": "ring", "slice_bytes": 0}


def test_condition_on_context():
    space = Space(("direct",), (ParamSpace("channels", "plan", (1, 2), Condition((("op", ("reduce",)),))),))
    assert space.suggest(FakeTrial({"channels": 2}), {"op": "reduce"}).plan_params == (("channels", 2),)
    assert space.suggest(FakeTrial({"channels": 2}), {"op": "copy"}).plan_params == ()


BAD = [
    ("not a mapping", ["a", "b"], "top level"),
    ("unknown top key", {**GOOD, "colour": 1}, "unknown key(s) colour"),
    ("missing sizes", {k: v for k, v in GOOD.items() if k != "sizes"}, "sizes: missing"),
    ("empty sizes", {**GOOD, "sizes": []}, "sizes: empty"),
    ("bad size", {**GOOD, "sizes": [8, "lots"]}, "sizes[1]: expected a size like"),
    ("fractional bytes", {**GOOD, "sizes": [8, "1.5"]}, "sizes[1]: '1.5' is not a whole number of bytes"),
    ("absurd size", {**GOOD, "sizes": [8, "2000000T"]}, "sizes[1]: '2000000T' is above the largest size"),
    ("negative size", {**GOOD, "sizes": [-8]}, "sizes[0]: must not be negative"),
    ("negative slice", with_space(slice_bytes=["-4K"]), "space.params.slice_bytes.values[0]: must not be negative"),
    (
        "bad size in a condition",
        with_space(slice_bytes=[0, "4K"], channels={"values": [1], "when": {"slice_bytes": "4Q"}}),
        "space.params.channels.when.slice_bytes: expected a size like",
    ),
    ("sizes not increasing", {**GOOD, "sizes": [64, 8]}, "must increase strictly"),
    ("unknown dtype", {**GOOD, "dtypes": ["float8"]}, "dtypes[0]: unknown dtype 'float8'"),
    ("bad ranks", {**GOOD, "ranks": [0]}, "ranks[0]"),
    ("bad trials", {**GOOD, "trials": "many"}, "trials: expected a whole number"),
    ("missing space", {k: v for k, v in GOOD.items() if k != "space"}, "space: missing"),
    ("empty strategies", {**GOOD, "space": {"strategy": [], "params": {}}}, "space.strategy: empty space"),
    (
        "unknown strategy",
        {**GOOD, "space": {"strategy": ["teleport"]}},
        "space.strategy[0]: unknown strategy 'teleport'",
    ),
    ("unknown parameter", with_space(warp=[1, 2]), "space.params.warp: unknown parameter 'warp'"),
    ("empty values", with_space(channels={"values": []}), "space.params.channels.values: empty space"),
    ("empty list", with_space(channels=[]), "space.params.channels: empty space"),
    ("no values at all", with_space(channels=None), "space.params.channels: empty space"),
    (
        "bad plan value",
        with_space(channels=[0]),
        "space.params.channels.values[0]: channels must be a whole number >= 1",
    ),
    (
        "bad datapath value",
        with_space(datapath=["gpu"]),
        "space.params.datapath.values[0]: datapath must be one of sm, ce",
    ),
    ("datapath out of range", with_space(blocks=[99]), "space.params.blocks.values[0]"),
    ("duplicate values", with_space(channels=[1, 1]), "lists a value twice"),
    ("unknown param key", with_space(channels={"values": [1], "if": {}}), "unknown key(s) if"),
    (
        "condition on a later name",
        with_space(blocks={"values": [4], "when": {"datapath": "sm"}}, datapath=["sm"]),
        "unknown name 'datapath'",
    ),
    (
        "condition value not a choice",
        with_space(datapath=["sm"], blocks={"values": [4], "when": {"datapath": "smm"}}),
        "'smm' is not one of datapath's values",
    ),
    (
        "condition on unknown strategy",
        with_space(channels={"values": [1], "when": {"strategy": "teleport"}}),
        "'teleport' is not one of strategy's values",
    ),
    ("condition not a mapping", with_space(channels={"values": [1], "when": "datapath == sm"}), "expected a mapping"),
]


@pytest.mark.parametrize("raw,needle", [pytest.param(raw, needle, id=name) for name, raw, needle in BAD])
def test_bad_sweeps_fail_with_file_and_field(raw, needle):
    with pytest.raises(SweepError) as err:
        parse_sweep(raw, "bad.yaml")
    message = str(err.value)
    assert message.startswith("bad.yaml: ") and needle in message
    assert "\n" not in message


def test_malformed_yaml_names_the_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("sizes: [8, 64K\nspace: {strategy: [direct]}\n")
    with pytest.raises(SweepError, match=r"broken\.yaml: malformed YAML at line \d+"):
        load_sweep_file(path)


def test_unknown_builtin_and_missing_file(tmp_path):
    with pytest.raises(SweepError, match="unknown sweep 'nope'.*quick"):
        resolve_sweep("nope")
    with pytest.raises(SweepError, match="cannot read"):
        resolve_sweep(str(tmp_path / "missing.yaml"))


def test_bucket_helpers():
    assert buckets_from_sizes([1, 2], "x") == (Bucket(1, 1), Bucket(2, None))
    assert Bucket(65536, None).text() == "[64K, inf)"
    assert Path(builtin_sweep_paths()["quick"]).suffix == ".yaml"


@pytest.mark.parametrize(
    ("bucket", "probes"),
    [
        (Bucket(8, 4095), (8, 128, 2048)),
        (Bucket(4096, 65535), (4096, 16384, 32768)),
        (Bucket(16 << 20, (256 << 20) - 1), (16 << 20, 64 << 20, 128 << 20)),
        (Bucket(8, 31), (8, 16)),  # the middle rounds onto an end
        (Bucket(8, 15), (8,)),  # no power of two above the edge
        (Bucket(256 << 20, None), (256 << 20,)),  # unbounded: the edge alone
        (Bucket(1000, 5000), (1000, 2048, 4096)),
    ],
)
def test_a_bucket_is_probed_at_its_edge_top_and_middle(bucket, probes):
    assert bucket.probe_bytes == probes
    assert all(bucket.contains(n) for n in probes)
