"""Plan files: the tuner's winners as versioned JSON, one definition for every reader.

One file per (GPU type, collective, rank layout, dtype)::

    results/<gpu-type>/<collective>-<layout>-<dtype>[-<counts>].json

Defined once, here, below every layer that reads or writes them (the tuner,
``load_plan``, the exporters, the CLI): ``model`` holds the frozen
dataclasses, ``schema`` derives the JSON Schema from them, ``io`` is the one
loader and the one writer, so whatever is written also loads, and
``purlin export`` and ``load_plan`` accept exactly the same files.
"""

from purlin_bench.plans.io import load_plan_file, parse_plan, plan_path, plan_text, validate_plan_data, write_plan
from purlin_bench.plans.model import (
    KIND,
    SCHEMA_VERSION,
    TIMING_CPU,
    TIMING_GPU,
    ArtifactError,
    PlanArtifact,
    PlanEntry,
    SweepRef,
)
from purlin_bench.plans.schema import plan_schema

__all__ = [
    "KIND",
    "SCHEMA_VERSION",
    "TIMING_CPU",
    "TIMING_GPU",
    "ArtifactError",
    "PlanArtifact",
    "PlanEntry",
    "SweepRef",
    "load_plan_file",
    "parse_plan",
    "plan_path",
    "plan_schema",
    "plan_text",
    "validate_plan_data",
    "write_plan",
]
