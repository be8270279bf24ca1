"""The plan artifact as data: the tuner's winners, versioned, one JSON file
per (GPU type, collective, rank layout, dtype).

A plan holds its schema version, the hardware fingerprint it was measured on,
the package version, the date, the sweep used (name and hash), the backend
(numpy plans are marked as CPU reference timings), and per size bucket the
winning configuration with its time, bus bandwidth, and the default's and the
baseline's times when known. :mod:`purlin_bench.plans.schema` derives the
file's JSON Schema from these classes; :mod:`purlin_bench.plans.io` is the
one reader and writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from purlin_bench.backends import REFERENCE, backend_class, names
from purlin_bench.backends.port import TIMING_GPU as PORT_TIMING_GPU
from purlin_bench.base.config import RunConfig
from purlin_bench.base.errors import PurlinError
from purlin_bench.base.hardware import Fingerprint

# 2: ``counts``, the distribution a variable collective's plan was tuned with
# (version 1 files are read as counts null: plans of fixed sizes).
SCHEMA_VERSION = 2
KIND = "purlin-plan"
TIMING_GPU = PORT_TIMING_GPU
TIMING_CPU = backend_class(REFERENCE).timing_kind  # CPU times of the reference, not GPU performance
BACKENDS = names()
# How each backend's times are labelled (Backend.timing_kind).
TIMINGS = tuple(dict.fromkeys(backend_class(name).timing_kind for name in BACKENDS))
# purlin_bench.tools.tune.tuner.SAMPLERS, repeated because a plan file must not
# import the tuner (a higher layer); a test keeps the two equal.
SAMPLERS = ("tpe", "random", "bruteforce")


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
    # Sizes per call (all-to-all-v, ...): how the tuned calls' counts were
    # drawn (spec.variable.DISTRIBUTIONS), part of the plan's key; None for
    # fixed sizes. Its buckets are by total bytes moved, as bench's rows are.
    counts: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def timing(self) -> str:
        return backend_class(self.backend).timing_kind

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": KIND,
            "collective": self.collective,
            "dtype": self.dtype,
            "redop": self.redop,
            "counts": self.counts,
            "ranks": self.ranks,
            "backend": self.backend,
            "timing": self.timing,
            "fingerprint": self.fingerprint.to_dict(),
            "package_version": self.package_version,
            "created": self.created,
            "sweep": {
                "name": self.sweep.name,
                "hash": self.sweep.hash,
                "sampler": self.sweep.sampler,
                "trials": self.sweep.trials,
                "seed": self.sweep.seed,
            },
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
