"""Timing results, shared by the backends that time and the tools that report."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    median_us: float  # per call
    samples_us: tuple[float, ...]  # one per repetition (each the mean of its batch of calls)
