"""JSON: the plan artifact itself, canonical. Its published JSON Schema is
``docs/plan.schema.json`` (tests validate exports against it)."""

from __future__ import annotations

from purlin_bench.tune.artifact import PlanArtifact

SCHEMA_PATH = "docs/plan.schema.json"


def render(plan: PlanArtifact, source: str) -> str:
    return plan.to_json()
