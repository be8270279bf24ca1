"""The one reader and writer of plan files.

Reading is: the bytes as UTF-8 JSON, the schema version and kind (so a newer
or foreign file is refused for what it is, not for its first unknown field),
the JSON Schema of :func:`~purlin_bench.plans.schema.plan_schema`, then
what a schema cannot express (finite numbers, ordered non-overlapping
buckets, a known collective), then the dataclasses. Writing runs the same
checks on the plan's data first, so nothing is written that would not load.
Every error is one :class:`ArtifactError` line naming the file and the field.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from purlin_bench.base.config import RunConfig
from purlin_bench.base.hardware import Fingerprint
from purlin_bench.plans.model import KIND, SCHEMA_VERSION, ArtifactError, PlanArtifact, PlanEntry, SweepRef
from purlin_bench.base.textfile import parse_json, read_text, write_output
from purlin_bench.plans.checks import check_content
from purlin_bench.plans.schema import plan_schema
from purlin_bench.spec.loader import CollectiveSpec, builtin_spec_paths, resolve

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

_TIMES = ("time_us", "default_time_us", "baseline_time_us")


def plan_path(out_dir: str | Path, gpu_type: str, collective: str, layout: str, dtype: str,
              counts: str | None = None) -> Path:
    """Where a plan lives; a variable collective's counts distribution is part of its name."""
    tail = f"-{counts}" if counts else ""
    return Path(out_dir) / gpu_type / f"{collective}-{layout}-{dtype}{tail}.json"


# ---------------------------------------------------------------- reading


def load_plan_file(path: str | Path, spec: CollectiveSpec | None = None) -> PlanArtifact:
    """The plan in ``path``; ``spec`` is the collective of a plan tuned from
    a user's spec file (a built-in collective needs none)."""
    path = Path(path)
    text = read_text(path, ArtifactError, "corrupt plan")
    data = parse_json(text, f"{path}: corrupt plan", ArtifactError)
    return parse_plan(data, str(path), spec)


def parse_plan(data: Any, source: str, spec: CollectiveSpec | None = None) -> PlanArtifact:
    """Plain data (parsed JSON) as a plan, after :func:`validate_plan_data`."""
    data = upgraded(data)
    validate_plan_data(data, source, spec)
    fp = data["fingerprint"]
    sw = data["sweep"]
    return PlanArtifact(
        collective=data["collective"],
        dtype=data["dtype"],
        redop=data["redop"],
        counts=data["counts"],
        ranks=data["ranks"],
        backend=data["backend"],
        fingerprint=Fingerprint(**{**fp, "devices": tuple(fp["devices"])}),
        package_version=data["package_version"],
        created=data["created"],
        sweep=SweepRef(sw["name"], sw["hash"], sw["sampler"], sw["trials"], sw["seed"]),
        entries=tuple(_entry(e) for e in data["entries"]),
        schema_version=data["schema_version"],
    )


def _entry(e: dict[str, Any]) -> PlanEntry:
    cfg = e["config"]
    return PlanEntry(
        min_bytes=e["min_bytes"],
        max_bytes=e["max_bytes"],
        measured_bytes=e["measured_bytes"],
        config=RunConfig.make(cfg["strategy"], cfg["plan_params"], cfg["exec_params"]),
        time_us=float(e["time_us"]),  # an integer in a hand-edited file is a time too
        busbw_gbps=float(e["busbw_gbps"]),
        default_time_us=_float(e["default_time_us"]),
        baseline_time_us=_float(e["baseline_time_us"]),
        trials=e["trials"],
        study=e["study"],
    )


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)


# ---------------------------------------------------------------- checking


def validate_plan_data(data: Any, source: str, spec: CollectiveSpec | None = None) -> None:
    """Raise one :class:`ArtifactError` line (``source: field: why``) unless
    ``data`` is a valid plan of this schema version."""

    def fail(where: str, why: str) -> ArtifactError:
        return ArtifactError(f"{source}: {where}: {why}")

    if not isinstance(data, dict):
        raise fail("top level", f"expected an object, got {_json_type(data)}")
    _check_version_and_kind(data, fail)
    if data["schema_version"] == 1 and "counts" in data:
        raise fail("counts", "not a field of schema version 1 (added in version 2)")
    data = upgraded(data)
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(data))
    if error is not None:
        raise fail(*_explain(error))
    for where, value in _numbers(data, ""):
        if not math.isfinite(value):
            field = where.rsplit(".", 1)[-1]
            raise fail(where, f"{value} is not a finite {'positive ' if field in _TIMES else ''}number")
    _check_entries(data["entries"], fail)
    check_content(data, fail)
    _check_collective(data["collective"], spec, fail)
    _check_counts(data, spec, fail)


def upgraded(data: Any) -> Any:
    """A version 1 plan (before ``counts``) as this version reads it: every
    version 1 plan is of fixed sizes. Anything else as it is."""
    if isinstance(data, dict) and data.get("schema_version") == 1 and "counts" not in data:
        return {**data, "schema_version": SCHEMA_VERSION, "counts": None}
    return data


def _check_counts(data: dict[str, Any], spec: CollectiveSpec | None, fail) -> None:
    spec = spec if spec is not None else resolve(data["collective"])
    if spec.variable and data["counts"] is None:
        raise fail("counts", f"is null, but {spec.name} takes its sizes per call: a plan of it names the counts "
                             f"distribution it was tuned with")
    if not spec.variable and data["counts"] is not None:
        raise fail("counts", f"{spec.name} has fixed sizes: its plan has no counts (got {data['counts']!r})")


def _check_version_and_kind(data: dict[str, Any], fail) -> None:
    if "schema_version" not in data:
        raise fail("schema_version", "missing field")
    version = data["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise fail("schema_version", f"expected an integer, got {_json_type(version)}")
    if version > SCHEMA_VERSION:
        raise fail("schema_version",
                   f"plan schema version {version} is newer than this purlin-bench reads ({SCHEMA_VERSION}): upgrade "
                   f"purlin-bench")
    if version < 1:
        raise fail("schema_version", f"must be >= 1, got {version}")
    kind = data.get("kind")
    if kind != KIND:
        raise fail("kind",
                   "missing field (not a purlin "
                   "plan)" if "kind" not in data else f"expected '{KIND}', got {kind!r} (not a purlin plan)")


def _check_entries(entries: list[dict[str, Any]], fail) -> None:
    for i, e in enumerate(entries):
        if e["max_bytes"] is not None and e["max_bytes"] < e["min_bytes"]:
            raise fail(f"entries[{i}].max_bytes", f"{e['max_bytes']} is below min_bytes {e['min_bytes']}")
        if i == 0:
            continue
        prev = entries[i - 1]
        if e["min_bytes"] <= prev["min_bytes"]:
            raise fail(f"entries[{i}].min_bytes",
                       f"entries must be sorted by min_bytes, without repeats: {e['min_bytes']} follows "
                       f"{prev['min_bytes']}")
        if prev["max_bytes"] is None or prev["max_bytes"] >= e["min_bytes"]:
            upper = "no upper bound" if prev["max_bytes"] is None else f"up to {prev['max_bytes']}"
            raise fail(f"entries[{i}].min_bytes",
                       f"{e['min_bytes']} overlaps entries[{i - 1}] (from {prev['min_bytes']}, {upper})")


def _check_collective(name: str, spec: CollectiveSpec | None, fail) -> None:
    if spec is not None:
        if name != spec.name:
            raise fail("collective", f"the plan is for {name!r}, the spec given is {spec.name!r}")
        return
    known = builtin_spec_paths()
    if name not in known:
        raise fail("collective",
                   f"unknown collective {name!r} (built-in: {', '.join(known)}); for a plan of your own collective, "
                   f"give its spec (--spec FILE.yaml, or spec= in Python)")


def _numbers(value: Any, where: str) -> Iterator[tuple[str, float]]:
    """Every float in ``value`` with its field path (JSON's NaN and Infinity
    parse as floats, and no schema keyword refuses them)."""
    if isinstance(value, float):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{where}[{i}]")


@lru_cache(maxsize=1)
def _validator() -> Any:
    # Imported here, not at the top: every `purlin` command imports this
    # module, and jsonschema costs about 0.1 s that only reading a plan needs.
    import jsonschema

    base = jsonschema.Draft202012Validator
    # JSON Schema counts 8.0 as an integer; a rank count or a byte size
    # written as a float is a broken file, not a number to round.
    strict = base.TYPE_CHECKER.redefine("integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool))
    schema = plan_schema()
    base.check_schema(schema)
    return jsonschema.validators.extend(base, type_checker=strict)(schema)


_TYPE_NAMES = {"integer": "an integer", "number": "a number", "string": "a string", "object": "an object",
               "array": "a list", "boolean": "a boolean", "null": "null"}


def _explain(error: ValidationError) -> tuple[str, str]:
    """(field, why) for the first schema violation, in this package's words."""
    where = _path(error.absolute_path)
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "required":
        missing = next(name for name in expected if name not in value)
        return _join(where, missing), "missing field"
    if kind == "additionalProperties":
        extra = sorted(k for k in value if k not in error.schema.get("properties", {}))
        return _join(where, extra[0]), "unknown field"
    where = where or "top level"
    if kind == "type":
        kinds = [expected] if isinstance(expected, str) else expected
        return where, f"expected {' or '.join(_TYPE_NAMES[k] for k in kinds)}, got {_json_type(value)}"
    if kind == "enum":
        listed = ", ".join("null" if v is None else str(v) for v in expected)
        return where, f"expected one of {listed}, got {_show(value)}"
    if kind == "const":
        return where, f"expected {_show(expected)}, got {_show(value)}"
    if kind == "minimum":
        return where, f"must be >= {expected}, got {value}"
    if kind == "exclusiveMinimum":
        return where, f"must be > {expected}, got {value}"
    if kind == "minItems":
        return where, f"expected at least {expected} item{'s' if expected != 1 else ''}, got {len(value)}"
    if kind == "minLength":
        return where, "must not be empty"
    if kind == "pattern":
        return where, f"{_show(value)} does not match {expected}"
    return where, " ".join(error.message.split())


def _path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _show(value: Any) -> str:
    return "null" if value is None else repr(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    names = {int: "an integer", float: "a number", str: "a string", dict: "an object", list: "a list"}
    return names.get(type(value), type(value).__name__)


# ---------------------------------------------------------------- writing


def plan_text(plan: PlanArtifact, source: str, spec: CollectiveSpec | None = None) -> str:
    """The plan as the JSON text of a plan file, after the loader's checks
    (``source`` names it in errors). ``allow_nan=False`` is a second guard:
    NaN and Infinity are not JSON, and other tools refuse them."""
    data = plan.to_dict()
    validate_plan_data(data, source, spec)
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def write_plan(plan: PlanArtifact, path: str | Path, spec: CollectiveSpec | None = None) -> None:
    """Check ``plan`` as :func:`load_plan_file` would, then write it atomically."""
    write_output(path, plan_text(plan, str(path), spec), make_folder=True)


__all__ = ["load_plan_file", "parse_plan", "plan_path", "plan_text", "upgraded", "validate_plan_data", "write_plan"]
