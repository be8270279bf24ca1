"""A runnable configuration: a strategy with its strategy parameter and the
backend's datapath parameters. What the tuner searches and plans store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from purlin_bench.base.errors import ProgramError


@dataclass(frozen=True)
class RunConfig:
    strategy: str
    plan_params: tuple[tuple[str, Any], ...] = ()  # slice_bytes, channels
    exec_params: tuple[tuple[str, Any], ...] = ()  # e.g. blocks, threads, datapath, unroll (cupy)

    @staticmethod
    def make(
        strategy: str, plan_params: dict[str, Any] | None = None, exec_params: dict[str, Any] | None = None
    ) -> "RunConfig":
        return RunConfig(
            strategy, tuple(sorted((plan_params or {}).items())), tuple(sorted((exec_params or {}).items()))
        )

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "plan_params": dict(self.plan_params), "exec_params": dict(self.exec_params)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "RunConfig":
        return RunConfig.make(
            str(data["strategy"]), dict(data.get("plan_params", {})), dict(data.get("exec_params", {}))
        )

    def text(self) -> str:
        parts = [f"{k}={v}" for k, v in self.plan_params + self.exec_params]
        return self.strategy + (f"({', '.join(parts)})" if parts else "")


@dataclass(frozen=True)
class Param:
    """A knob, of a strategy (slice bytes, channels) or of a backend's
    datapath (blocks, threads, ...): its domain, its default and the help
    text the CLI and sweeps show. One type for both, so a sweep, a plan and
    the CLI check every parameter the same way."""

    name: str
    default: Any
    choices: tuple[Any, ...] = field(default=())
    minimum: int | None = None
    maximum: int | None = None
    help: str = ""
    why: str = ""  # why the maximum is what it is, said when a value exceeds it
    # The values a program whose sizes come per call can run with, where fewer
    # than ``choices`` (empty: all): the tuner maps a sampled value outside them
    # to the first, so no trial is spent on a configuration that cannot run.
    variable_choices: tuple[Any, ...] = field(default=())

    def check(self, value: Any, owner: str = "") -> Any:
        """``value`` if it is in the domain, else a ProgramError naming the
        parameter (and ``owner``, e.g. "strategy 'ring'", when given)."""
        name = f"parameter {self.name} of {owner}" if owner else self.name
        if self.choices:
            if value not in self.choices:
                raise ProgramError(f"{name} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProgramError(f"{name} must be a whole number, got {value!r}")
        if self.maximum is None and self.minimum is not None and value < self.minimum:
            raise ProgramError(f"{name} must be a whole number >= {self.minimum}, got {value}")
        if self.minimum is not None and value < self.minimum or self.maximum is not None and value > self.maximum:
            because = f" ({self.why})" if self.why and self.maximum is not None and value > self.maximum else ""
            raise ProgramError(f"{name} must be in [{self.minimum}, {self.maximum}], got {value}{because}")
        return value
