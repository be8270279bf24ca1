"""A fake device for tests: NumPy inside, a device's semantics outside.

It runs every program for real on the CPU reference executor (so its
outputs are checked like any backend's), but it behaves as a device does
towards the layers above: datapath parameters with domains, buffer sets,
a device-side Reference, baselines, and times taken side by side in turns
from a deterministic model of a device clock (launch cost, per-step cost,
bandwidth that grows with blocks), optionally drifting from batch to batch
as a shared GPU's clock does. Faults can be planted (``FakeDevice``): a
configuration that gives wrong outputs, one the device refuses, one that
fails when timed, one that is fast. So bench, tune, the guard and plan-vs-default run their
device paths in CI, with no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.backends.port import Backend, TimingPolicy, check_params, take_turns
from purlin_bench.base.config import Param
from purlin_bench.base.dtypes import count_wrong
from purlin_bench.base.errors import ExecutionError
from purlin_bench.base.hardware import Fingerprint, layout_slug
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance
from purlin_bench.base.timing import Timing

PARAMS = (
    Param(
        "blocks", 0, minimum=0, maximum=32, help="thread blocks per (rank, channel) list; 0 sizes them from the data"
    ),
    Param("datapath", "sm", choices=("sm", "ce"), help="opening stages on SMs or on copy engines"),
)


def _matches(when: Mapping[str, Any], program: Program, params: Mapping[str, Any]) -> bool:
    scope = {"strategy": program.strategy, **dict(program.params), **params}
    return bool(when) and all(scope.get(k) == v for k, v in when.items())


@dataclass(frozen=True)
class FakeDevice:
    """Faults and clock of the fake device. Each ``*_when`` is a mapping of
    parameter or ``strategy`` to a value; a configuration matching all of
    them has the fault."""

    wrong_when: Mapping[str, Any] | None = None  # outputs off by one element
    refuse_when: Mapping[str, Any] | None = None  # prepare raises, as a launch that does not fit
    fail_timing_when: Mapping[str, Any] | None = None  # raises when timed (a watchdog mid-batch)
    drift: float = 0.0  # each batch this fraction slower than the last
    fast_when: Mapping[str, Any] | None = None  # 10x faster: with wrong_when, a fast wrong configuration


class FakeRunner:
    def __init__(self, backend: "FakeBackend", program: Program, sets: int, params: dict[str, Any]):
        self.program, self.sets, self.params = program, sets, params
        self.device = backend.device
        self._cpu = NumpyRunner(program, backend.seed, sets)
        self.cost_us = backend.cost_us(program, params)
        self.fail = _matches(self.device.fail_timing_when or {}, program, params)
        self.closed = False

    def load(self, inputs: Sequence[np.ndarray], slot: int = 0) -> None:
        self._cpu.load(inputs, slot)

    def run(self, slot: int = 0) -> None:
        self._cpu.run(slot)

    def outputs(self, slot: int = 0) -> list[np.ndarray]:
        outs = self._cpu.outputs(slot)
        if _matches(self.device.wrong_when or {}, self.program, self.params):
            first = next((o for o in outs if o.size), None)
            if first is not None:
                first[0] = first[0] + 1
        return outs

    def candidate(self) -> "Clocked":
        if self.closed:
            raise ExecutionError("the fake device was asked to time a closed runner")
        return Clocked(self.cost_us, self.fail)

    def close(self) -> None:
        self.closed = True
        self._cpu.close()


@dataclass(frozen=True)
class Clocked:
    """A timing candidate: what one call costs on the modelled clock."""

    cost_us: float
    fail: bool = False


class FakeReference:
    def __init__(self, inst: Instance, program: Program, inputs: Sequence[np.ndarray], backend: "FakeBackend"):
        self.inst, self.layout = inst, backend.rank_layout()
        self.expected = inst.reference(list(inputs), program.redop)
        # The plain code a user would write (purlin_bench/baselines/plain.py), modelled 3x slower.
        self.baseline_cost = 3 * backend.cost_us(program, {})

    def count_wrong(self, runner: FakeRunner, slot: int = 0) -> int:
        return sum(count_wrong(a, b, None) for a, b in zip(runner.outputs(slot), self.expected))

    def baseline(self, name: str) -> Clocked:
        from purlin_bench import baselines

        return baselines.make(name, baselines.Site(FakeBackend.name, self.layout, None, self.inst, reference=self))


class FakeBackend(Backend):
    name = "fake"
    description = "fake device (NumPy inside, a modelled clock; for tests)"
    params = PARAMS
    timing_kind = "fake"
    default_bench_max = "64K"
    default_tune_max = "64K"
    trial_policy = TimingPolicy(iters=2, warmup=1, reps=3)
    # The device new instances get when none is given: the CLI makes
    # backends by name, so a test plants faults here (with monkeypatch).
    default_device = FakeDevice()

    def __init__(
        self, ranks: int, gpus: tuple[int, ...] | None = None, seed: int = 0, device: FakeDevice | None = None
    ):
        super().__init__(ranks, gpus, seed)
        self.device = device or self.default_device
        self.batches = 0  # batches timed so far: the drift's clock

    @classmethod
    def available(cls) -> str | None:
        return None

    @classmethod
    def device_count(cls) -> int:
        return 8

    def describe(self) -> str:
        return f"{self.ranks} ranks on a fake device"

    def fingerprint(self) -> Fingerprint:
        return Fingerprint(
            backend=self.name,
            gpu_type="fake",
            layout=layout_slug(self.ranks, len(set(self.gpus or ())), True),
            ranks=self.ranks,
            link="a modelled device",
            device_name="fake device",
            devices=self.gpus or (),
        )

    def time_label(self, policy: TimingPolicy) -> str:
        return "a modelled clock"

    def cost_us(self, program: Program, params: Mapping[str, Any]) -> float:
        """The modelled time of one call: launch and per-step costs that grow
        with blocks, and bandwidth that grows with them up to 8, so the best
        block count depends on the size as on a GPU."""
        blocks = params.get("blocks") or 4
        steps = max(sum(len(steps) for steps in chans) for chans in program.lists)
        moved = (sum(program.in_counts) + sum(program.out_counts)) * np.dtype(np.float32).itemsize
        bandwidth = 50e3 * min(blocks, 8) * (1.1 if params.get("datapath") == "ce" else 1.0)  # bytes per us
        cost = 1.5 + 0.05 * blocks + 0.3 * steps + moved / bandwidth
        if _matches(self.device.fast_when or {}, program, dict(params)):
            cost /= 10
        return cost

    def prepare(self, program: Program, sets: int = 1, **params: Any) -> FakeRunner:
        checked = check_params(type(self), params)
        if _matches(self.device.refuse_when or {}, program, checked):
            raise ExecutionError(f"the fake device refuses {program.strategy} with {checked}")
        return FakeRunner(self, program, sets, checked)

    def reference(self, runner: FakeRunner, inst: Instance, inputs: Sequence[np.ndarray]) -> FakeReference:
        return FakeReference(inst, runner.program, inputs, self)

    def time(self, candidates: Sequence[Clocked], policy: TimingPolicy, between=None) -> list[Timing]:
        for c in candidates:
            if c.fail:
                raise ExecutionError("watchdog: the fake device timed out mid-batch")

        def batch_of(c: Clocked):
            def batch() -> float:
                self.batches += 1
                return c.cost_us * (1 + self.device.drift) ** self.batches

            return batch

        samples = take_turns([batch_of(c) for c in candidates], policy.reps, between)
        return [Timing(float(np.median(s)), tuple(s)) for s in samples]


BACKEND = FakeBackend
