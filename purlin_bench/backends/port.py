"""The port every backend implements, and nothing above the backends names one.

A **Backend** runs Programs on one rank layout (R virtual ranks on one
device, or one rank per GPU): it says whether it can run here and why not,
which datapath parameters it takes, what machine its times come from, what
its default datapath is for an instance, and it prepares a Program into a
**Runner** over a number of buffer sets. It also computes a **Reference**
(the expected outputs of exact inputs, where its runners can compare them:
on the device for a GPU) and times **candidates** side by side: its own
runners and the baselines that run on its layout ("the plain code a user
would write": a registry of their own, purlin_bench/baselines/, one file each).

The measurement service (purlin_bench.measure.service) is the only caller of
most of this; check, bench, tune and the Python API go through it.
"""

from __future__ import annotations

import platform
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol, Sequence

import numpy as np

from purlin_bench.base.config import Param, RunConfig
from purlin_bench.base.hardware import Fingerprint
from purlin_bench.program.model import Program
from purlin_bench.spec.roofline import Bandwidth
from purlin_bench.spec.instance import Instance
from purlin_bench.base.timing import Timing


# The timing kind of device times; every other kind (the CPU reference's
# "cpu-reference", the fake device's "fake") is marked as not GPU speed.
TIMING_GPU = "gpu"

# How a backend's ranks sit (Backend.rank_layout), as the baselines registry
# (purlin_bench/baselines/) says where each baseline runs: every rank in one
# process on one device; one rank per GPU in one process; one process per
# rank, each on a GPU of its own (or the CPU); processes sharing one GPU.
VIRTUAL, GPUS, PROCS, PROCS_SHARED = "virtual", "gpus", "procs", "procs-shared"
LAYOUTS = {
    VIRTUAL: "virtual ranks (one process, one device)",
    GPUS: "one rank per GPU in one process",
    PROCS: "one process per rank",
    PROCS_SHARED: "processes sharing a GPU",
}


@dataclass(frozen=True)
class TimingPolicy:
    """How to time: ``reps`` batches of ``iters`` calls after ``warmup``
    untimed batches, the median batch per call; on a GPU each batch is one
    CUDA graph replay when ``graph`` (else eager launches)."""

    iters: int = 20
    warmup: int = 5
    reps: int = 5
    graph: bool = True


class Candidate(Protocol):
    """Something a backend can time: one of its runners, or a baseline.
    Opaque above the port: only the backend that made it times it."""


class Runner(Protocol):
    """A Program prepared on a backend over ``sets`` buffer sets (rotated
    when timed, so one call's data is not the next call's cache)."""

    program: Program
    sets: int
    # Seconds spent building device code for this runner (a compiled
    # datapath's NVRTC build; 0 where nothing is built or it was cached).
    build_s: float

    def load(self, inputs: Sequence[np.ndarray], slot: int = 0, counts: Sequence[int] | None = None) -> None:
        """Write per-rank inputs into buffer set ``slot``; a variable-size
        program's call counts go with them (they belong to the set, as on a
        GPU they sit in device memory), checked before anything is written."""

    def run(self, slot: int = 0) -> None:
        """One call on buffer set ``slot``, outputs poisoned first; waits
        for it and raises (WatchdogTimeout, ExecutionError) if it failed."""

    def outputs(self, slot: int = 0) -> list[np.ndarray]:
        """Host copies of every rank's output buffer."""

    def candidate(self) -> Candidate:
        """This runner as a timing candidate, cycling its buffer sets."""

    def close(self) -> None:
        """Let go of what the runner holds (device tables, buffers)."""


class StreamRunner(Runner, Protocol):
    """A runner a caller orders on its own device stream, one rank of it per
    process (purlin_bench.torch: a serving stack's stream and CUDA graphs).
    What such a caller needs and no more: enqueue a call, and say whether an
    earlier one failed, without a sync."""

    def enqueue(self, stream: int, rank: int, src: int, dst: int, counts: int = 0, slot: int = 0) -> None:
        """Enqueue one call of ``rank`` on the device stream whose handle is
        ``stream``: copy ``rank``'s input from device address ``src`` into
        its buffer, a variable program's counts (int64, one per chunk name)
        from address ``counts``, run, copy its output to address ``dst``.
        Capturable in a CUDA graph: nothing is allocated and nothing waits.
        Where ``src`` is the address of ``rank``'s input buffer, or ``dst``
        that of its output buffer (see ``buffers``), that copy is left out."""

    def buffers(self, rank: int, slot: int = 0) -> tuple[int, int, int, int]:
        """``rank``'s input and output buffers of set ``slot``: (input
        address, its bytes, output address, its bytes), 0 and 0 for one it
        has none of. A caller may keep its tensors there (zero-copy): a call
        leaves the input as it was (an out-of-place program never writes an
        input, the validator proves it) and the output holds the call's
        result until the next call on ``rank`` of any runner of the same
        backend begins (runners may share their buffers)."""

    def failure(self) -> str | None:
        """What an earlier call recorded (a timeout, an abort), or None."""

    def raise_counts_error(self) -> None:
        """Raise CountsError for a count out of range an earlier call met,
        and forget it (that call ran clamped; the runner goes on)."""


class Reference(Protocol):
    """Expected outputs of one instance's exact inputs, where a runner of
    the same backend can compare with them."""

    def count_wrong(self, runner: Runner, slot: int = 0) -> int:
        """Output elements of ``runner``'s last call on ``slot`` that differ
        from the expected ones in any bit."""

    def baseline(self, name: str) -> Candidate:
        """Baseline ``name`` over the same inputs and buffer sets, as a
        timing candidate; PurlinError if this backend cannot time it here."""


class Backend(ABC):
    """One datapath behind the port. A subclass is one folder under
    ``purlin_bench/backends/`` plus one line in the registry."""

    name: ClassVar[str]
    description: ClassVar[str]
    # Datapath parameters, as the CLI, sweeps and plans see them.
    params: ClassVar[tuple[Param, ...]] = ()
    # How its times are labelled: "gpu" times are device times; anything
    # else (the CPU reference) is marked so no one reads it as GPU speed.
    timing_kind: ClassVar[str] = TIMING_GPU
    # Where ranks can sit on several devices (``gpus``); False: simulated.
    has_devices: ClassVar[bool] = True
    # Sweeps a user gets without asking: the largest message bench and tune
    # measure by default (None: no cap), since a CPU reference can't do 1 GiB.
    default_bench_max: ClassVar[str] = "256M"
    default_tune_max: ClassVar[str | None] = None
    # At most this many trials per study unless asked (None: the sweep's).
    default_tune_trials: ClassVar[int | None] = None
    # What the tuner times each trial with: on the H200, 20 calls per CUDA
    # graph and the median of 5 replays; 10 x 3 let 3% noise at 4 KiB pick
    # losers (the finalists are timed again anyway, tune/finals.py).
    trial_policy: ClassVar[TimingPolicy] = TimingPolicy(iters=20, warmup=2, reps=5)

    # Whether one rank of it can run in a process of its own (one process
    # per rank, buffers shared between them): such a backend takes a
    # ``procs`` context (backends/procs.py) and then prepares runners that run
    # this process's rank, while loading and reading every rank's buffers.
    runs_in_procs: ClassVar[bool] = False
    # Whether its runners take variable-size programs (a counts vector per
    # buffer set, Runner.load) and which element types it moves: a backend
    # is asked for neither until it says so (issue 31: fp8 and the *v
    # collectives on the CPU reference first, the GPU datapath later).
    variable_sizes: ClassVar[bool] = False
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "float64", "float16", "bfloat16", "int32")

    def __init__(self, ranks: int, gpus: tuple[int, ...] | None = None, seed: int = 0, procs: Any = None):
        self.ranks = len(gpus) if gpus else ranks
        self.gpus = tuple(gpus) if gpus else None
        self.seed = seed
        self.procs = procs

    @classmethod
    @abstractmethod
    def available(cls) -> str | None:
        """None where this backend can run here, else why not (one line)."""

    @classmethod
    def times_gpu(cls) -> bool:
        """Whether its times are device times (plans, notes and defaults
        differ for a CPU reference, whose times say nothing of a GPU)."""
        return cls.timing_kind == TIMING_GPU

    @classmethod
    def device_count(cls) -> int:
        """Devices this backend can put ranks on (``--gpus all``)."""
        return 0

    @property
    def fused(self) -> bool:
        """Every rank runs in one launch on one device (virtual ranks)."""
        return not self.gpus or len(set(self.gpus)) <= 1

    @abstractmethod
    def describe(self) -> str:
        """Where the ranks run, in words, for a table's title."""

    @abstractmethod
    def fingerprint(self) -> Fingerprint:
        """The machine and layout its times are measured on."""

    def environment(self) -> dict[str, Any]:
        """Versions and devices, stored with every result."""
        import purlin_bench

        return {
            "purlin_bench": purlin_bench.__version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "backend": self.name,
            "host": platform.node(),
        }

    def time_label(self, policy: TimingPolicy) -> str:
        """How this backend's times are taken under ``policy``, in words.
        A backend that does not take the policy as given (caps its calls,
        has no graphs) says here what it does instead: bench prints this
        next to the policy asked for, as the timing actually done."""
        return "CUDA graphs" if policy.graph else "eager launches"

    def default_config(self, inst: Instance, config: RunConfig) -> RunConfig:
        """The heuristics' strategy choice ``config`` with this backend's
        default datapath for ``inst`` (it may adjust plan parameters that
        only make sense with its datapath choice)."""
        return config

    def guard(self) -> AbstractContextManager[None]:
        """Around every call into the backend: turns its library's own errors
        (a CUDA launch failure, out of device memory) into ExecutionError, so
        a tune records the configuration as invalid and the CLI prints one line."""
        return nullcontext()

    def faulted(self) -> bool:
        """Whether a call of any runner of this process recorded a failure not
        yet reset: one cheap read, asked before every stream-ordered call."""
        return False

    def warm_up(self, dtype: str, redop: str | None) -> int:
        """Build ahead what a runner would build on first use; how many."""
        return 0

    def join_run(self) -> None:
        """With ranks in processes: this rank's collective setup (what every
        rank must do together, such as exchanging device handles). Every rank
        runs it in the command that opens the run; set up later, on rank 0's
        first local call, it would wait for peers that are not listening."""

    def copy_bandwidth(self) -> Bandwidth | None:
        """The copy bandwidth under a collective's floor, measured now."""
        return None

    def rank_layout(self) -> str:
        """How the ranks sit (VIRTUAL, GPUS, PROCS, PROCS_SHARED): which
        baselines run here. A backend whose processes can share a device says so."""
        if self.procs is not None:
            return PROCS
        return VIRTUAL if self.fused else GPUS

    def baselines(self) -> tuple[str, ...]:
        """The baselines this layout can time, the strongest first (the registry's)."""
        from purlin_bench import baselines

        return baselines.offered(self.name, self.rank_layout())

    def refused_baselines(self) -> dict[str, str]:
        """Baselines this backend has that this layout cannot time, each
        with why (asked for, bench says so and goes on without them)."""
        from purlin_bench import baselines

        return baselines.refused(self.name, self.rank_layout())

    @abstractmethod
    def prepare(self, program: Program, sets: int = 1, **params: Any) -> Runner:
        """A runner for ``program``; unknown or out-of-domain ``params`` are
        refused with a ProgramError naming them."""

    @abstractmethod
    def reference(self, runner: Runner, inst: Instance, inputs: Sequence[np.ndarray]) -> Reference:
        """The expected outputs of ``inputs`` (already loaded into every
        buffer set of ``runner``), computed before any call of it."""

    @abstractmethod
    def time(
        self, candidates: Sequence[Candidate], policy: TimingPolicy, between: Callable[[], None] | None = None
    ) -> list[Timing]:
        """Microseconds per call of each candidate, their batches in turns;
        ``between`` (when given) runs before every timed batch, outside it:
        with one process per rank it is a barrier, so every rank starts a
        batch together and none times its wait for a late peer."""

    def source(self, program: Program, **params: Any) -> str:
        """The device code this backend would generate for ``program`` with
        ``params`` (``purlin show --source``); needs no device."""
        from purlin_bench.base.errors import PurlinError

        raise PurlinError(f"backend {self.name} generates no source for a program")

    def rank_baseline(self, runner: Runner, inst: Instance, name: str) -> Candidate:
        """With one process per rank: this rank's part of baseline ``name``
        over ``runner``'s inputs (every rank makes it, and times it, together)."""
        from purlin_bench import baselines

        return baselines.make(name, baselines.Site(self.name, self.rank_layout(), runner, inst, part=self))


def check_params(backend: type[Backend], params: dict[str, Any]) -> dict[str, Any]:
    """``params`` checked against ``backend``'s datapath parameters, with
    their defaults filled in; a ProgramError names what is wrong."""
    from purlin_bench.base.errors import ProgramError

    known = {p.name: p for p in backend.params}
    unknown = set(params) - set(known)
    if unknown:
        listed = ", ".join(known) or "none"
        raise ProgramError(
            f"unknown datapath parameter(s) {sorted(unknown)} for backend {backend.name} (known: {listed})"
        )
    return {p.name: p.check(params.get(p.name, p.default)) for p in backend.params}


def unsupported(backend: type[Backend], program: Program) -> str | None:
    """Why ``backend`` cannot run ``program`` (its dtype, variable sizes), or None."""
    if program.dtype not in backend.dtypes:
        return f"backend {backend.name} does not move {program.dtype} yet (it moves {', '.join(backend.dtypes)})"
    return refuses_sizes_per_call(backend, program.collective) if program.variable else None


def refuses_sizes_per_call(backend: type[Backend], collective: str) -> str | None:
    """Why ``backend`` cannot run ``collective``, whose sizes come per call (None: it can)."""
    if backend.variable_sizes:
        return None
    return f"backend {backend.name} runs no variable-size program yet ({collective}'s sizes come per call)"


def check_inputs(program: Program, inputs: Sequence[np.ndarray]) -> None:
    """Per-rank inputs of ``program``'s shapes, or an ExecutionError naming the first that is not."""
    from purlin_bench.base.errors import ExecutionError

    if len(inputs) != program.ranks:
        raise ExecutionError(f"expected {program.ranks} input arrays, got {len(inputs)}")
    for r, x in enumerate(inputs):
        if x.shape != (program.in_counts[r],):
            raise ExecutionError(f"input of rank {r} has shape {x.shape}, expected ({program.in_counts[r]},)")


def take_turns(batches: Sequence[Any], reps: int, between: Callable[[], None] | None = None) -> list[list[float]]:
    """``reps`` samples of every batch (a callable returning one sample),
    the batches taking turns; sample ``k`` of every candidate is taken
    before sample ``k + 1`` of any.

    Rounds alternate direction (A B C, C B A, A B C, ...), so no candidate
    always runs right after the same other one: in a fixed order the default,
    always timed after CuPy's baseline, came out 1-4% slower than the same
    configuration timed first, even with each batch primed."""
    samples: list[list[float]] = [[] for _ in batches]
    order = list(range(len(batches)))
    for k in range(reps):
        for i in order if k % 2 == 0 else order[::-1]:
            if between is not None:
                between()
            samples[i].append(batches[i]())
    return samples


def run_once(runner: Runner, inputs: Sequence[np.ndarray], slot: int = 0) -> list[np.ndarray]:
    """One call of ``runner`` on ``inputs`` through the port: load, run, outputs."""
    runner.load(inputs, slot)
    runner.run(slot)
    return runner.outputs(slot)
