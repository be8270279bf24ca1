"""Plan artifacts: the tuner's winners, versioned, one JSON file per
(GPU type, collective, rank layout, dtype)::

    results/<gpu-type>/<collective>-<layout>-<dtype>.json

A plan holds its schema version, the hardware fingerprint it was measured on,
the package version, the date, the sweep used (name and hash), the backend
(numpy plans are marked as CPU reference timings), and per size bucket the
winning configuration with its time, bus bandwidth, and the default's and the
baseline's times when known. Its JSON Schema is ``docs/plan.schema.json``.

Writes are atomic (:mod:`purlin_bench.atomic`): a reader sees the old plan
or the new one, never half of one. Loading validates
every field and says which one is wrong; a plan from a newer schema is refused
rather than misread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from purlin_bench.atomic import write_text_atomic
from purlin_bench.config import RunConfig
from purlin_bench.errors import PurlinError
from purlin_bench.hardware import Fingerprint

SCHEMA_VERSION = 1
KIND = "purlin-plan"
TIMING_GPU = "gpu"
TIMING_CPU = "cpu-reference"  # numpy: CPU times of the reference, not GPU performance


class ArtifactError(PurlinError):
    """A plan artifact cannot be read, is invalid, or does not fit."""


@dataclass(frozen=True)
class SweepRef:
    name: str
    hash: str
    sampler: str
    trials: int  # asked per study
    seed: int | None


@dataclass(frozen=True)
class PlanEntry:
    """The winner of one size bucket."""

    min_bytes: int
    max_bytes: int | None  # inclusive; None: no upper bound
    measured_bytes: int  # the message size the study timed (nccl-tests S)
    config: RunConfig
    time_us: float
    busbw_gbps: float
    default_time_us: float | None
    baseline_time_us: float | None
    trials: int  # finished trials of its study
    study: str

    def contains(self, nbytes: int) -> bool:
        return nbytes >= self.min_bytes and (self.max_bytes is None or nbytes <= self.max_bytes)

    def speedup_over_default(self) -> float | None:
        return self.default_time_us / self.time_us if self.default_time_us else None

    def speedup_over_baseline(self) -> float | None:
        return self.baseline_time_us / self.time_us if self.baseline_time_us else None


@dataclass(frozen=True)
class PlanArtifact:
    collective: str
    dtype: str
    ranks: int
    backend: str
    fingerprint: Fingerprint
    package_version: str
    created: str  # ISO 8601, UTC
    sweep: SweepRef
    entries: tuple[PlanEntry, ...]  # sorted by min_bytes
    redop: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def timing(self) -> str:
        return TIMING_CPU if self.backend == "numpy" else TIMING_GPU

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": KIND,
            "collective": self.collective,
            "dtype": self.dtype,
            "redop": self.redop,
            "ranks": self.ranks,
            "backend": self.backend,
            "timing": self.timing,
            "fingerprint": self.fingerprint.to_dict(),
            "package_version": self.package_version,
            "created": self.created,
            "sweep": {"name": self.sweep.name, "hash": self.sweep.hash, "sampler": self.sweep.sampler, "trials": self.sweep.trials, "seed": self.sweep.seed},
            "entries": [
                {
                    "min_bytes": e.min_bytes,
                    "max_bytes": e.max_bytes,
                    "measured_bytes": e.measured_bytes,
                    "config": e.config.to_dict(),
                    "time_us": e.time_us,
                    "busbw_gbps": e.busbw_gbps,
                    "default_time_us": e.default_time_us,
                    "baseline_time_us": e.baseline_time_us,
                    "trials": e.trials,
                    "study": e.study,
                }
                for e in self.entries
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def plan_path(out_dir: str | Path, gpu_type: str, collective: str, layout: str, dtype: str) -> Path:
    return Path(out_dir) / gpu_type / f"{collective}-{layout}-{dtype}.json"


# ---------------------------------------------------------------- writing


def write_plan(plan: PlanArtifact, path: str | Path) -> None:
    write_text_atomic(path, plan.to_json())


# ---------------------------------------------------------------- reading


def load_plan_file(path: str | Path) -> PlanArtifact:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: corrupt plan: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return parse_plan(data, str(path))


def parse_plan(data: Any, source: str) -> PlanArtifact:
    """Validate plain data as a plan; every error names ``source`` and the field."""
    r = _Reader(source)
    top = r.mapping(data, "top level")
    version = r.field(top, "schema_version", int)
    if version > SCHEMA_VERSION:
        raise ArtifactError(f"{source}: plan schema version {version} is newer than this purlin-bench reads ({SCHEMA_VERSION}): upgrade purlin-bench")
    if version < 1:
        raise ArtifactError(f"{source}: schema_version: must be >= 1, got {version}")
    kind = r.field(top, "kind", str)
    if kind != KIND:
        raise ArtifactError(f"{source}: kind: expected '{KIND}', got '{kind}' (not a purlin plan)")
    backend = r.field(top, "backend", str)
    if backend not in ("numpy", "cupy"):
        raise ArtifactError(f"{source}: backend: expected numpy or cupy, got '{backend}'")
    fp = r.mapping(r.field(top, "fingerprint", dict), "fingerprint")
    fingerprint = Fingerprint(
        backend=r.field(fp, "backend", str, "fingerprint."),
        gpu_type=r.field(fp, "gpu_type", str, "fingerprint."),
        layout=r.field(fp, "layout", str, "fingerprint."),
        ranks=r.field(fp, "ranks", int, "fingerprint."),
        link=r.field(fp, "link", str, "fingerprint."),
        device_name=r.field(fp, "device_name", str, "fingerprint."),
        devices=tuple(r.ints(r.field(fp, "devices", list, "fingerprint."), "fingerprint.devices")),
        compute_capability=r.optional(fp, "compute_capability", str, "fingerprint."),
        sm_count=r.optional(fp, "sm_count", int, "fingerprint."),
        memory_bytes=r.optional(fp, "memory_bytes", int, "fingerprint."),
        driver_version=r.optional(fp, "driver_version", str, "fingerprint."),
        cuda_runtime_version=r.optional(fp, "cuda_runtime_version", str, "fingerprint."),
        cpu_model=r.optional(fp, "cpu_model", str, "fingerprint."),
    )
    sw = r.mapping(r.field(top, "sweep", dict), "sweep")
    sweep = SweepRef(
        name=r.field(sw, "name", str, "sweep."),
        hash=r.field(sw, "hash", str, "sweep."),
        sampler=r.field(sw, "sampler", str, "sweep."),
        trials=r.field(sw, "trials", int, "sweep."),
        seed=r.optional(sw, "seed", int, "sweep."),
    )
    raw_entries = r.field(top, "entries", list)
    entries = tuple(_parse_entry(r, e, f"entries[{i}]") for i, e in enumerate(raw_entries))
    for a, b in zip(entries, entries[1:]):
        if b.min_bytes <= a.min_bytes:
            raise ArtifactError(f"{source}: entries: must be sorted by min_bytes, without repeats")
    return PlanArtifact(
        collective=r.field(top, "collective", str),
        dtype=r.field(top, "dtype", str),
        redop=r.optional(top, "redop", str),
        ranks=r.field(top, "ranks", int),
        backend=backend,
        fingerprint=fingerprint,
        package_version=r.field(top, "package_version", str),
        created=r.field(top, "created", str),
        sweep=sweep,
        entries=entries,
        schema_version=version,
    )


def _parse_entry(r: "_Reader", raw: Any, where: str) -> PlanEntry:
    e = r.mapping(raw, where)
    p = f"{where}."
    cfg = r.mapping(r.field(e, "config", dict, p), f"{where}.config")
    strategy = r.field(cfg, "strategy", str, f"{p}config.")
    plan_params = r.mapping(cfg.get("plan_params", {}), f"{where}.config.plan_params")
    exec_params = r.mapping(cfg.get("exec_params", {}), f"{where}.config.exec_params")
    for group, values in (("plan_params", plan_params), ("exec_params", exec_params)):
        for key, value in values.items():
            if isinstance(value, (dict, list)) or value is None:
                raise ArtifactError(f"{r.source}: {where}.config.{group}.{key}: expected a number or a string, got {type(value).__name__}")
    return PlanEntry(
        min_bytes=r.field(e, "min_bytes", int, p),
        max_bytes=r.optional(e, "max_bytes", int, p),
        measured_bytes=r.field(e, "measured_bytes", int, p),
        config=RunConfig.make(strategy, plan_params, exec_params),
        time_us=r.field(e, "time_us", float, p),
        busbw_gbps=r.field(e, "busbw_gbps", float, p),
        default_time_us=r.optional(e, "default_time_us", float, p),
        baseline_time_us=r.optional(e, "baseline_time_us", float, p),
        trials=r.field(e, "trials", int, p),
        study=r.field(e, "study", str, p),
    )


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", dict: "an object", list: "a list"}


class _Reader:
    """Typed field access with errors that name the file and the field."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, why: str) -> ArtifactError:
        return ArtifactError(f"{self.source}: {where}: {why}")

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {_json_type(value)}")
        return value

    def field(self, obj: dict[str, Any], name: str, kind: type, prefix: str = "") -> Any:
        if name not in obj:
            raise self.fail(f"{prefix}{name}", "missing field")
        return self._typed(obj[name], kind, f"{prefix}{name}")

    def optional(self, obj: dict[str, Any], name: str, kind: type, prefix: str = "") -> Any:
        value = obj.get(name)
        return None if value is None else self._typed(value, kind, f"{prefix}{name}")

    def ints(self, values: list[Any], where: str) -> list[int]:
        return [self._typed(v, int, f"{where}[{i}]") for i, v in enumerate(values)]

    def _typed(self, value: Any, kind: type, where: str) -> Any:
        ok = isinstance(value, kind) and not isinstance(value, bool)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # JSON writes 2.0 as 2.0, but hand edits may not
        if not ok:
            raise self.fail(where, f"expected {_TYPE_NAMES[kind]}, got {_json_type(value)}")
        return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return _TYPE_NAMES.get(type(value), type(value).__name__)
