"""One process per rank: rank 0 drives, every other rank serves.

The way serving stacks and ``torchrun`` jobs run: each process owns one rank,
and their buffers are shared (CUDA IPC on a GPU, shared memory on the CPU
reference). Everything above the backends stays as it is: rank 0 runs the
command (check, bench, tune) and gets a **Driver**, a Backend whose runners
load and read every rank's buffers in this process (the memory is shared)
and whose calls and timings are commands that every rank runs at once, each
its own part. The other ranks run :func:`serve`: they take commands in order
and answer each; nothing of the command line runs there.

* A row's time is the slowest rank's (as nccl-tests reports it); a check
  reads every rank's outputs, so ``#wrong`` counts every rank's elements.
* Every wait is bounded by the watchdog the user set (PURLIN_WATCHDOG_S): a
  flag wait by its length, a wait on a peer (an answer, a barrier, the next
  command) by the peer's silence (procs/liveness.py), so a stopped or frozen
  rank is named within it while a long command on a live one goes on;
  ``COMMAND_S`` and ``IDLE_S`` are only backstops for a live peer that never
  answers. A rank that dies is a DistError naming it and the step (our
  launcher aborts the run, procs/launch.py), and a lost rank ends the run.
* A rank that fails a command cancels that command's scope (Group.scope):
  every other rank's waits in it stop at once. After a failed call or
  timing, every rank resets the runners' flags before the error is raised,
  so the next call starts clean on all of them.
"""

from __future__ import annotations

import math
import os
import pickle
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from purlin_bench.backends.port import Backend, Runner, TimingPolicy
from purlin_bench.procs import Group, RankEnv, channel, connect
from purlin_bench.procs.errors import Cancelled, DistError, error_kind, error_of
from purlin_bench.procs.liveness import silence_bound
from purlin_bench.procs.shm import remove_run_dir, run_dir
from purlin_bench.base.errors import CallAborted, ExecutionError, ProgramError, PurlinError
from purlin_bench.base.hardware import Fingerprint
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance
from purlin_bench.base.timing import Timing

# How long a flag wait may take with ranks in processes: on one GPU they are
# time-sliced (milliseconds a cross-process wait), on two CI cores five
# processes take turns; a wait must outlast many slices. Below the
# launcher's grace period (cli/procs.py gives it this plus 10 s), so a rank
# stuck on a dead peer names the wait before it is stopped.
DEFAULT_WATCHDOG_S = 10.0
COMMAND_S = 600.0
IDLE_S = 1800.0


def watchdog_s() -> float:
    """PURLIN_WATCHDOG_S, checked: a finite number of seconds above 0."""
    text = os.environ.get("PURLIN_WATCHDOG_S")
    if text is None:
        return DEFAULT_WATCHDOG_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise PurlinError(f"PURLIN_WATCHDOG_S must be a number of seconds above 0, got {text!r}")
    return value


@dataclass(frozen=True)
class Procs:
    """What a backend in one process of a run is given: the group, which
    rank and device it is, a private folder for shared memory, how long a
    flag wait may take."""

    group: Group
    rank: int
    size: int
    device: int | None
    folder: Path
    launcher: str
    watchdog_s: float = DEFAULT_WATCHDOG_S

    def describe(self) -> str:
        return f"{self.size} processes ({self.launcher}), one rank each; a time is the slowest rank's"


_joined: list[Procs] = []


def join(env: RankEnv) -> Procs:
    """Join this process's run (once; then :func:`current` returns it)."""
    if _joined:
        return _joined[0]
    limit = watchdog_s()
    # The user's watchdog bounds a peer's silence and the store's answers.
    group = connect(env, timeout_s=COMMAND_S, silence_s=silence_bound(limit))
    # A random part: two torchrun jobs may share a run id (its default is "none").
    folder = str(run_dir(f"{env.run}-{secrets.token_hex(4)}")) if group.rank == 0 else None
    folder = group.broadcast(folder, "folder")
    procs = Procs(group, group.rank, group.size, env.device, Path(folder), env.launcher, limit)
    _joined.append(procs)
    return procs


def current() -> Procs | None:
    """The run this process joined, if any."""
    return _joined[0] if _joined else None


def leave() -> None:
    """Rank 0 tells the workers to stop; everyone lets go of the run."""
    if not _joined:
        return
    procs = _joined.pop()
    try:
        if procs.rank == 0:
            _send(procs, ("exit",))
    except PurlinError:
        pass  # a worker already gone: the launcher reports it
    finally:
        if procs.rank == 0:
            remove_run_dir(procs.folder)
        procs.group.close()


# -- the command channel (procs/channel.py) ---------------------------------------
def _send(procs: Procs, command: tuple) -> None:
    channel.send(procs.group, command)


def _answers(procs: Procs, what: str) -> list[Any]:
    return channel.answers(procs.group, what, COMMAND_S)


_runner_ids = [0]


class Driver(Backend):
    """Rank 0's view of a run: a backend over every rank. Made by
    :func:`drive` as a subclass of the rank backend's class, so its
    parameters, policies and labels are that backend's."""

    part_class: type[Backend]

    def __init__(self, ranks: int, gpus: tuple[int, ...] | None = None, seed: int = 0, procs: Procs | None = None):
        if procs is None:
            raise PurlinError("a Driver is rank 0 of a run: make it with procs.drive()")
        Backend.__init__(self, procs.size, None, seed, procs)
        self.part = self.part_class(procs.size, None, seed, procs=procs)
        self.candidates: dict[Any, Any] = {}  # key -> this rank's candidate
        self._runners: dict[int, Runner] = {}  # id -> this rank's runner, while open
        self.lost: str | None = None
        self._command(("open", self.part_class.name, seed), "open", self._join)

    def _join(self) -> None:
        with self.part.guard():  # a device error is one line, as in any command
            self.part.join_run()

    def _command(self, command: tuple, what: str, local: Callable[[], Any] | None = None) -> list[Any]:
        """Send ``command`` to every worker, run ``local`` here meanwhile,
        and return every rank's result; the first rank's error is raised.
        A rank lost (DistError) ends the run: every later command says so."""
        if self.lost:
            raise DistError(f"this run lost a rank earlier ({self.lost}); nothing more can run")
        try:
            return self._command_once(command, what, local)
        except DistError as exc:
            self.lost = str(exc)
            raise

    def _command_once(self, command: tuple, what: str, local: Callable[[], Any] | None) -> list[Any]:
        _send(self.procs, command)
        mine: Any = None
        failure: BaseException | None = None
        try:
            mine = local() if local else None
        except DistError:
            raise
        except PurlinError as exc:
            failure = exc
            if not isinstance(exc, Cancelled):
                self.procs.group.cancel(f"rank 0: {exc}")
        answers = _answers(self.procs, what) if failure is None else self._drain(what, failure)
        answers[0] = mine
        return answers

    def _drain(self, what: str, failure: BaseException) -> list[Any]:
        # The workers finish their part too (a watchdog bounds it), so that
        # nobody is still inside the call when the caller resets or retries.
        try:
            _answers(self.procs, what)
        except DistError as exc:
            raise type(exc)(f"{exc}; rank 0 meanwhile: {failure}") from None
        except PurlinError as exc:
            only_refused = isinstance(failure, ProgramError) and not isinstance(exc, (ProgramError, Cancelled))
            # A call rank 0 left because another rank's wait timed out says
            # less than that rank's timeout, which names the flag.
            only_aborted = isinstance(failure, CallAborted) and not isinstance(exc, (Cancelled, CallAborted))
            if isinstance(failure, Cancelled) or only_refused or only_aborted:
                raise  # rank 0 only stopped (or refused) where this rank failed: say that one
        kind = error_kind(failure) if isinstance(failure, (ProgramError, CallAborted)) else None
        raise error_of(kind, f"rank 0: {failure}") from None

    def describe(self) -> str:
        return f"{self.part.describe()}; {self.procs.describe()}"

    def fingerprint(self) -> Fingerprint:
        prints = self._command(("fingerprint",), "fingerprint", self.part.fingerprint)
        kinds = {fp.gpu_type for fp in prints}
        if len(kinds) > 1:
            raise PurlinError(
                f"the ranks of this run sit on different kinds of device ({', '.join(sorted(kinds))}): a plan needs one"
            )
        devices = tuple(d for fp in prints for d in fp.devices)
        return Fingerprint(**{**prints[0].to_dict(), "devices": devices})

    def environment(self) -> dict[str, Any]:
        return {**self.part.environment(), "procs": self.procs.size, "launcher": self.procs.launcher}

    def default_config(self, inst, config):
        return self.part.default_config(inst, config)

    def guard(self):
        return self.part.guard()

    def warm_up(self, dtype: str, redop: str | None) -> int:
        return self._command(("warm_up", dtype, redop), "warm_up", lambda: self.part.warm_up(dtype, redop))[0]

    def copy_bandwidth(self):
        return self.part.copy_bandwidth()

    def baselines(self) -> tuple[str, ...]:
        return self.part.baselines()

    def refused_baselines(self) -> dict[str, str]:
        return self.part.refused_baselines()

    def candidates_runner(self, rid: int) -> Runner | None:
        """This rank's runner of prepared id ``rid``, while it is open."""
        return self._runners.get(rid)

    def prepare(self, program: Program, sets: int = 1, **params: Any) -> "DriverRunner":
        _runner_ids[0] += 1
        rid, made = _runner_ids[0], []
        try:
            def mine():
                made.append(self.part.prepare(program, sets, **params))
                return made[0]

            local = self._command(("prepare", rid, program, sets, params), "prepare", mine)[0]
        except (ExecutionError, ProgramError):  # ProgramError: a rank's refusal (the compiled build bound)
            for runner in made:  # this rank's, where another rank refused
                runner.close()
            if not self.lost:  # the ranks that did prepare it let it go
                self._command(("close", rid), "close")
            raise
        self._runners[rid] = local
        return DriverRunner(self, rid, local)

    def reference(self, runner: "DriverRunner", inst: Instance, inputs: Sequence[Any]) -> "DriverReference":
        return DriverReference(self, runner, inst, self.part.reference(runner.local, inst, inputs))

    def time(self, candidates: Sequence["Remote"], policy: TimingPolicy, between=None) -> list[Timing]:
        ids = [c.key for c in candidates]
        barrier = _turns(self.procs)
        mine = [self.candidates[c.key] for c in candidates]
        try:
            per_rank = self._command(("time", ids, policy), "time", lambda: self.part.time(mine, policy, barrier))
        except ExecutionError:
            # As after a failed call: every rank resets the runners it timed,
            # so no flag, epoch or abort word of the failed batch is left set.
            if not self.lost:
                rids = sorted({key[1] for key in ids})
                self._command(("reset", *rids), "reset", lambda: [_reset(self.candidates_runner(r)) for r in rids])
            raise
        # A row's time is the slowest rank's.
        return [max((timings[i] for timings in per_rank), key=lambda t: t.median_us) for i in range(len(ids))]


@dataclass(frozen=True)
class Remote:
    """A candidate every rank holds under one key: a runner's or a baseline's."""

    key: Any


class DriverRunner:
    """A runner over every rank: loads and outputs here, in the shared
    buffers; calls on every rank at once."""

    def __init__(self, driver: Driver, rid: int, local: Runner):
        self.driver, self.rid, self.local = driver, rid, local
        self.program, self.sets = local.program, local.sets

    def load(self, inputs, slot: int = 0, counts=None) -> None:
        # A variable-size call's counts go with the inputs into the shared buffer set.
        self.local.load(inputs, slot, **({} if counts is None else {"counts": counts}))

    def loaded_counts(self, slot: int = 0):
        return self.local.loaded_counts(slot)

    def run(self, slot: int = 0) -> None:
        try:
            self.driver._command(("run", self.rid, slot), "run", lambda: self.local.run(slot))
        except ExecutionError:
            if not self.driver.lost:
                self.driver._command(("reset", self.rid), "reset", lambda: _reset(self.local))
            raise

    def outputs(self, slot: int = 0):
        return self.local.outputs(slot)

    def candidate(self) -> Remote:
        self.driver.candidates[("runner", self.rid)] = self.local.candidate()
        return Remote(("runner", self.rid))

    def close(self) -> None:
        if self.local is None:
            return
        local, self.local = self.local, None
        self.driver._runners.pop(self.rid, None)
        for key in [k for k in self.driver.candidates if k[1] == self.rid]:
            del self.driver.candidates[key]
        self.driver._command(("close", self.rid), "close", local.close)


class DriverReference:
    def __init__(self, driver: Driver, runner: DriverRunner, inst: Instance, inner):
        self.driver, self.runner, self.inst, self.inner = driver, runner, inst, inner

    def count_wrong(self, runner: DriverRunner, slot: int = 0) -> int:
        return self.inner.count_wrong(runner.local, slot)

    def baseline(self, name: str) -> Remote:
        rid = self.runner.rid
        inst = self.inst
        def mine():
            return self.driver.part.rank_baseline(self.runner.local, inst, name)

        local = self.driver._command(("baseline", rid, name, inst), f"baseline {name}", mine)[0]
        self.driver.candidates[("baseline", rid, name)] = local
        return Remote(("baseline", rid, name))


def _reset(runner: Any) -> None:
    if hasattr(runner, "reset"):
        runner.reset()


def _turns(procs: Procs) -> Callable[[], None]:
    """The barrier before every timed batch, the same on every rank."""
    count = [0]

    def barrier() -> None:
        count[0] += 1
        procs.group.barrier(f"turn{count[0]}")

    return barrier


_drivers: dict[str, Driver] = {}


def drive(cls: type[Backend], procs: Procs, seed: int = 0) -> Driver:
    """Rank 0's backend over the run, for rank backend ``cls`` (one per
    backend and seed: the workers hold one part each, with its buffers)."""
    if not cls.runs_in_procs:
        raise PurlinError(f"backend {cls.name} cannot run one process per rank")
    if procs.rank != 0:
        raise PurlinError("only rank 0 drives a run")
    # One per backend: each worker holds one part per backend, and the
    # parts' shared files are named by a count they must agree on.
    key = cls.name
    if key not in _drivers:
        driver_class = type(f"{cls.__name__}Procs", (Driver, cls), {"part_class": cls})
        _drivers[key] = driver_class(procs.size, None, seed, procs=procs)
    return _drivers[key]


# -- the workers ---------------------------------------------------------------
def serve(procs: Procs) -> int:
    """Run rank ``procs.rank``'s part of every command rank 0 sends, until
    it says exit; the exit code."""
    from purlin_bench.backends import backend_class

    part: Backend | None = None
    runners: dict[int, Runner] = {}
    candidates: dict[Any, Any] = {}
    n = 0
    while True:
        n += 1
        raw = channel.wait(procs.group, f"cmd/{n}", IDLE_S, 0, f"rank {procs.rank} waited for rank 0's next command")
        command = pickle.loads(raw)
        op = command[0]
        channel.scope(procs.group, n)
        if op == "exit":
            return 0
        try:
            if op == "open":
                # A fresh part each time, as rank 0's is: both then join the
                # run's collective setup in this one command.
                for runner in runners.values():
                    runner.close()
                runners.clear()
                candidates.clear()
                part = None
                fresh = backend_class(command[1])(procs.size, None, command[2], procs=procs)
                with fresh.guard():
                    fresh.join_run()
                part = fresh
                answer: Any = None
            else:
                answer = _handle(part, runners, candidates, procs, command)
            reply = ("ok", answer)
        except DistError:
            raise  # the run is lost: this rank says why and exits
        except PurlinError as exc:
            reply = ("error", str(exc), error_kind(exc))
            if not isinstance(exc, Cancelled):
                procs.group.cancel(f"rank {procs.rank}: {exc}")
        procs.group.store.set(f"ans/{n}/{procs.rank}", pickle.dumps(reply))


def _handle(part: Backend, runners: dict, candidates: dict, procs: Procs, command: tuple) -> Any:
    op, args = command[0], command[1:]
    if op == "fingerprint":
        return part.fingerprint()
    if op == "warm_up":
        return part.warm_up(*args)
    if op == "prepare":
        rid, program, sets, params = args
        with part.guard():
            runners[rid] = part.prepare(program, sets, **params)
        return None
    if op == "run":
        with part.guard():
            runners[args[0]].run(args[1])
        return None
    if op == "reset":
        for rid in args:
            if rid in runners:
                _reset(runners[rid])
        return None
    if op == "baseline":
        rid, name, inst = args
        with part.guard():
            candidates[("baseline", rid, name)] = part.rank_baseline(runners[rid], inst, name)
        return None
    if op == "time":
        ids, policy = args
        for key in ids:
            if key[0] == "runner" and key not in candidates:
                candidates[key] = runners[key[1]].candidate()
        with part.guard():
            return part.time([candidates[k] for k in ids], policy, _turns(procs))
    if op == "close":
        rid = args[0]
        for key in [k for k in candidates if k[1] == rid]:
            del candidates[key]
        runner = runners.pop(rid, None)
        if runner is not None:
            runner.close()
        return None
    raise ExecutionError(f"unknown command {op!r} from rank 0")
