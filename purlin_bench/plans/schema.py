"""The plan file's JSON Schema, built from the model and the registries it
names (strategies, dtypes, reductions), so the published
``docs/plan.schema.json`` cannot drift from what the loader accepts.

Regenerate the published copy with::

    python3 -m purlin_bench.plans --schema > docs/plan.schema.json
"""

from __future__ import annotations

import json
from typing import Any

from purlin_bench.base.dtypes import DTYPES, REDOPS
from purlin_bench.plans.model import BACKENDS, KIND, SAMPLERS, SCHEMA_VERSION, TIMING_CPU, TIMINGS
from purlin_bench.spec.variable import DISTRIBUTIONS
from purlin_bench.strategies import STRATEGIES

SCHEMA_ID = "https://github.com/purlin-bench/purlin-bench/docs/plan.schema.json"
PARAM_TYPES = ["integer", "number", "string", "boolean"]


def _nullable(kind: str, **more: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **more}


def _object(properties: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    # Every field is required, null where unknown: a reader never has to
    # guess whether a missing field means "unknown" or "forgotten".
    out: dict[str, Any] = {"type": "object"}
    if description:
        out["description"] = description
    out.update(required=list(properties), additionalProperties=False, properties=properties)
    return out


def fingerprint_schema() -> dict[str, Any]:
    return _object({
        "backend": {"type": "string", "enum": list(BACKENDS)},
        "gpu_type": {
            "type": "string",
            "pattern": "^[a-z0-9][a-z0-9-]*$",
            "description": "h200, a100, ...; cpu for the numpy reference.",
        },
        "layout": {
            "type": "string",
            "pattern": "^([0-9]+vr|(nvlink|pcie)-[0-9]+|[0-9]+proc-([0-9]+gpu|cpu))$",
            "description": "8vr: 8 virtual ranks on one device; nvlink-8: one rank per GPU on 8 GPUs with peer access;"
            " 2proc-1gpu: one process per rank, 2 processes on 1 GPU (3proc-cpu: on the CPU reference).",
        },
        "ranks": {"type": "integer", "minimum": 1},
        "link": {"type": "string"},
        "device_name": {"type": "string"},
        "devices": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "compute_capability": _nullable("string"),
        "sm_count": _nullable("integer", minimum=1),
        "memory_bytes": _nullable("integer", minimum=0),
        "driver_version": _nullable("string"),
        "cuda_runtime_version": _nullable("string"),
        "cpu_model": _nullable("string"),
    })  # fmt: skip


def sweep_schema() -> dict[str, Any]:
    return _object({
        "name": {"type": "string"},
        "hash": {"type": "string", "pattern": "^[0-9a-f]+$"},
        "sampler": {"type": "string", "enum": list(SAMPLERS)},
        "trials": {"type": "integer", "minimum": 1},
        "seed": _nullable("integer"),
    })  # fmt: skip


def config_schema() -> dict[str, Any]:
    params = {"type": "object", "additionalProperties": {"type": PARAM_TYPES}}
    return _object({
        "strategy": {"type": "string", "enum": list(STRATEGIES)},
        "plan_params": params,
        "exec_params": params,
    })  # fmt: skip


def entry_schema() -> dict[str, Any]:
    time = {"type": "number", "exclusiveMinimum": 0, "description": "Microseconds; finite."}
    return _object(
        {
            "min_bytes": {"type": "integer", "minimum": 0},
            "max_bytes": _nullable(
                "integer", minimum=0, description="Inclusive, at least min_bytes; null: no upper bound."
            ),
            "measured_bytes": {"type": "integer", "minimum": 0},
            "config": {"$ref": "#/$defs/config"},
            "time_us": time,
            "busbw_gbps": {"type": "number", "minimum": 0},
            "default_time_us": {**time, "type": ["number", "null"]},
            "baseline_time_us": {**time, "type": ["number", "null"]},
            "trials": {"type": "integer", "minimum": 0},
            "study": {"type": "string"},
        },
        "The winner of one message-size bucket. Entries are sorted by min_bytes and do not overlap.",
    )


def plan_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a plan file of this schema version.

    What a schema cannot say is checked by the loader as well: buckets sorted,
    non-overlapping and not inverted, every number finite, and the collective
    a built-in one (or one whose spec the reader is given)."""
    top = _object({
        "schema_version": {"const": SCHEMA_VERSION},
        "kind": {"const": KIND},
        "collective": {
            "type": "string",
            "minLength": 1,
            "description": "A built-in collective, or the name of a user's spec file.",
        },
        "dtype": {"type": "string", "enum": list(DTYPES)},
        "redop": {"type": ["string", "null"], "enum": [*REDOPS, None]},
        "counts": {
            "type": ["string", "null"],
            "enum": [*DISTRIBUTIONS, None],
            "description": "A collective of sizes per call: how its tuned calls' counts were drawn (buckets are by"
            " total bytes); null for fixed sizes.",
        },
        "ranks": {"type": "integer", "minimum": 1},
        "backend": {"type": "string", "enum": list(BACKENDS)},
        "timing": {
            "type": "string",
            "enum": list(TIMINGS),
            "description": f"how the backend's times were taken; {TIMING_CPU}: CPU times of the reference executor,"
            " not GPU performance.",
        },
        "fingerprint": {"$ref": "#/$defs/fingerprint"},
        "package_version": {"type": "string"},
        "created": {"type": "string", "description": "ISO 8601 date and time, UTC."},
        "sweep": {"$ref": "#/$defs/sweep"},
        "entries": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/entry"}},
    })  # fmt: skip
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "purlin-bench plan artifact",
        "description": "Tuned configurations of one collective, dtype and rank layout on one GPU type, per"
        " message-size bucket (results/<gpu-type>/<collective>-<layout>-<dtype>[-<counts>].json;"
        " `purlin export --format json`)."
        f" Schema version {SCHEMA_VERSION}. Generated by `python3 -m purlin_bench.plans --schema`.",
        **top,
        "$defs": {
            "fingerprint": fingerprint_schema(),
            "sweep": sweep_schema(),
            "config": config_schema(),
            "entry": entry_schema(),
        },
    }


def schema_text() -> str:
    """:func:`plan_schema` as the published file's text."""
    return json.dumps(plan_schema(), indent=2) + "\n"


__all__ = ["plan_schema", "schema_text"]
