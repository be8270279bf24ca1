"""JSON: the plan artifact itself, canonical, checked and written by the same
code as the tuner's plan files (so an export always loads again). Its JSON
Schema is ``docs/plan.schema.json``, generated from
:func:`purlin_bench.plans.plan_schema`."""

from __future__ import annotations

from purlin_bench.plans import PlanArtifact, plan_text


def render(plan: PlanArtifact, source: str) -> str:
    return plan_text(plan, source)
