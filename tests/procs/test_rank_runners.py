"""The rank runners of one process per rank, in one process: two ranks on two
threads (flags, watchdogs naming rank, step and flag), the run opening with
every rank's collective setup, and errors crossing ranks by their class."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from purlin_bench.backends.numpy.ranks import RankRunner
from purlin_bench.backends.procs import Procs
from purlin_bench.procs import Group, Store, StoreServer, channel
from purlin_bench.base.errors import WatchdogTimeout
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec.instance import instantiate
from purlin_bench.spec.loader import resolve


# -- the rank runner in one process, two ranks on two threads -----------------
def _two_ranks(tmp_path: Path, watchdog_s: float):
    token = b"t" * 32
    server = StoreServer(token)
    groups = [Group(Store(*server.address, token), r, 2, "test", timeout_s=10) for r in range(2)]
    return server, [Procs(g, g.rank, 2, None, tmp_path, "test", watchdog_s) for g in groups]


def _program(collective: str, strategy: str, count: int = 1001):
    inst = instantiate(resolve(collective), 2, count, 4)
    return inst, derive_program(inst, strategy, "float32", None, {}, False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", ["direct", "push", "two-shot", "ring"])
def test_rank_runners_on_threads_match_the_reference(tmp_path, strategy):
    server, procs = _two_ranks(tmp_path, 10)
    inst, program = _program("all-reduce", strategy)
    runners: list[RankRunner | None] = [None, None]

    def make(r: int) -> None:
        runners[r] = RankRunner(program, procs[r], 2, "t")

    threads = [threading.Thread(target=make, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    inputs = exact_inputs(program.in_counts, np.dtype(np.float32), "sum")
    expected = inst.reference(inputs, "sum")
    for slot in range(2):
        runners[0].load(inputs, slot)
        for call in range(3):  # epochs advance; the same flags serve every call
            threads = [threading.Thread(target=runners[r].run, args=(slot,)) for r in range(2)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            got = runners[1].outputs(slot)  # any rank reads every rank's buffers
            assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert not list(tmp_path.iterdir()), "the shared files were not unlinked once mapped"
    for r in runners:
        r.close()
    server.close()


@pytest.mark.timeout(60)
def test_a_peer_that_never_calls_is_a_watchdog_naming_rank_step_and_flag(tmp_path):
    server, procs = _two_ranks(tmp_path, 0.5)
    _, program = _program("all-reduce", "direct", 64)
    runners: list[RankRunner | None] = [None, None]
    threads = [
        threading.Thread(target=lambda r=r: runners.__setitem__(r, RankRunner(program, procs[r], 1, "w")))
        for r in range(2)
    ]
    [t.start() for t in threads]
    [t.join() for t in threads]
    start = time.monotonic()
    with pytest.raises(WatchdogTimeout) as err:
        runners[0].run(0)  # rank 1 never runs
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert "rank 0 channel" in message and "step" in message and "r0.flag[" in message
    assert "its notify never came" in message
    runners[0].reset()
    assert int(runners[0].flags[0].max()) == 0 and runners[0].epoch == 0
    for r in runners:
        r.close()
    server.close()


def test_every_flag_has_one_notifier_a_call():
    """The shared-memory flags are plain stores (ranks.py): that needs one
    process, one step, per flag word and call."""
    from purlin_bench.program.model import Notify
    from purlin_bench.spec.loader import load_all_builtin
    from purlin_bench.strategies import STRATEGIES

    for spec in load_all_builtin():
        for ranks in (2, 3, 5):
            inst = instantiate(spec, ranks, 33, 4)
            for name in STRATEGIES:
                try:
                    program = derive_program(inst, name, "float32", None, {}, False)
                except Exception:
                    continue
                notifiers: dict = {}
                for sid, step in program.steps():
                    if isinstance(step, Notify):
                        notifiers.setdefault(step.flag, []).append(sid)
                assert all(len(s) == 1 for s in notifiers.values()), (spec.name, ranks, name)


def test_processors_that_reorder_stores_are_refused_in_one_line():
    from purlin_bench.backends.numpy.ranks import check_store_order
    from purlin_bench.base.errors import ExecutionError

    check_store_order("x86_64")
    check_store_order("AMD64")
    for machine in ("aarch64", "arm64", "ppc64le", ""):
        with pytest.raises(ExecutionError, match="x86's store order.*without --procs"):
            check_store_order(machine)


@pytest.mark.timeout(60)
def test_the_run_opens_with_every_ranks_collective_setup_in_one_command(tmp_path, monkeypatch):
    """A part's collective setup (the CUDA IPC world's device exchange) runs
    on every rank in the open command: made lazily by rank 0's first local
    call (the floor's copy bandwidth), it waited for workers that were
    waiting for a command, and bench --procs on a GPU printed nothing."""
    from purlin_bench.backends import procs as procs_mod
    from purlin_bench.backends.numpy import NumpyBackend

    joined = []

    def join_run(self):
        self.procs.group.barrier("test-join", timeout_s=5)  # a DistError unless both ranks are here
        joined.append(self.procs.rank)

    monkeypatch.setattr(NumpyBackend, "join_run", join_run)
    monkeypatch.setattr(channel, "sequence", [0])  # this run's commands start at 1, as a fresh process's do
    monkeypatch.setattr(procs_mod, "_drivers", {})
    server, procs = _two_ranks(tmp_path, 10)
    codes = []
    worker = threading.Thread(target=lambda: codes.append(procs_mod.serve(procs[1])))
    worker.start()
    procs_mod.drive(NumpyBackend, procs[0])
    assert sorted(joined) == [0, 1]
    procs_mod._send(procs[0], ("exit",))
    worker.join(10)
    assert codes == [0]
    server.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "failing, raised, said_by",
    [
        ({0: "refuse"}, "CapacityError", 0),
        ({1: "refuse"}, "CapacityError", 1),
        ({0: "refuse", 1: "refuse"}, "CapacityError", 0),
        ({0: "refuse", 1: "fail"}, "ExecutionError", 1),  # a refusal never hides a failure
        ({0: "fail", 1: "refuse"}, "ExecutionError", 0),
    ],
    ids=["rank0", "rank1", "both", "rank0-refuses-rank1-fails", "rank0-fails-rank1-refuses"],
)
def test_a_build_bound_refusal_on_any_rank_reaches_rank_0_as_itself(tmp_path, monkeypatch, failing, raised, said_by):
    """check reports a program past the compiled kernel's build bound as n/a
    (a CapacityError): with ranks in processes the refusal must arrive as
    one too, from whichever rank refused, not as the ExecutionError of a
    failed run, unless another rank truly failed; the runners the other
    ranks made are closed, and the run goes on."""
    from purlin_bench.backends import procs as procs_mod
    from purlin_bench.backends.numpy import NumpyBackend
    from purlin_bench.base.errors import CapacityError, ExecutionError

    real_prepare, closed = NumpyBackend.prepare, []

    class Made:  # a runner made without the ranks' shared setup, so no rank waits on the failing one
        def __init__(self, rank):
            self.rank = rank

        def close(self):
            closed.append(self.rank)

    def prepare(self, program, sets=1, **params):
        if program.strategy != "ring":
            return real_prepare(self, program, sets, **params)
        how = failing.get(self.procs.rank)
        if how == "refuse":
            raise CapacityError("past the build bound: use kernel=interpreted")
        if how == "fail":
            raise ExecutionError("the device went away")
        return Made(self.procs.rank)

    monkeypatch.setattr(NumpyBackend, "prepare", prepare)
    monkeypatch.setattr(channel, "sequence", [0])
    monkeypatch.setattr(procs_mod, "_drivers", {})
    server, procs = _two_ranks(tmp_path, 10)
    codes = []
    worker = threading.Thread(target=lambda: codes.append(procs_mod.serve(procs[1])))
    worker.start()
    try:
        driver = procs_mod.drive(NumpyBackend, procs[0])
        with pytest.raises((CapacityError, ExecutionError)) as caught:
            driver.prepare(_program("all-reduce", "ring")[1])
        assert type(caught.value).__name__ == raised and str(caught.value).startswith(f"rank {said_by}: ")
        assert sorted(closed) == [r for r in (0, 1) if r not in failing]
        runner = driver.prepare(_program("all-reduce", "direct")[1])
        runner.run()
        runner.close()
        assert driver.lost is None
    finally:
        procs_mod._send(procs[0], ("exit",))
        worker.join(10)
        server.close()
    assert codes == [0]


def test_an_error_crosses_ranks_by_its_class_name():
    """What a worker's answer carries of an error, and what rank 0 raises
    for it: a refusal keeps its class (one this process lacks is still a
    ProgramError), a cancellation stays one, anything else is an ExecutionError;
    a failure is said before a refusal, and both before a cancellation."""
    import pickle

    from purlin_bench.procs.errors import Cancelled, error_kind, error_of, kind_order
    from purlin_bench.base.errors import CallAborted, CapacityError, ExecutionError, ProgramError
    from purlin_bench.program.validate import ProgramInvalid

    for exc in (
        CapacityError("c"),
        ProgramInvalid("p"),
        Cancelled("x"),
        ExecutionError("e"),
        WatchdogTimeout("w"),
        CallAborted("a"),
    ):
        kind = pickle.loads(pickle.dumps(error_kind(exc)))
        back = error_of(kind, "m")
        kept = isinstance(exc, (CapacityError, Cancelled, CallAborted))
        want = type(exc) if kept else ProgramError if isinstance(exc, ProgramError) else ExecutionError
        assert type(back) is want and str(back) == "m"
    assert type(error_of("NotAClassHere", "m")) is ProgramError and type(error_of("PurlinError", "m")) is ProgramError
    orders = [kind_order(error_kind(e)) for e in (ExecutionError("e"), CapacityError("c"), Cancelled("x"))]
    assert orders == sorted(set(orders))
    # a call left because another rank's wait timed out is said after that timeout, as a cancellation is
    assert (
        kind_order(error_kind(CallAborted("a")))
        == kind_order(error_kind(Cancelled("x")))
        > kind_order(error_kind(WatchdogTimeout("w")))
    )


class _DeviceExchangingWorld:
    """The CUDA IPC world's collective part, without CuPy: every rank's
    device goes to every other over the group when it is made."""

    def __init__(self, ranks, procs):
        where = procs.group.allgather((0, "bus-0"), "ipc-devices")
        self.devices, self.gpus = (0,) * ranks, len({bus for _, bus in where})
        self.shared_gpu = self.gpus < ranks


@pytest.mark.timeout(60)
def test_the_gpu_world_is_made_on_every_rank_when_the_run_opens(tmp_path, monkeypatch):
    """Rank 0's first local calls (the floor's copy bandwidth, the
    baselines) then find the world made and wait on no peer."""
    import purlin_bench.backends.cupy.runtime.device as device
    import purlin_bench.backends.cupy.runtime.ipc as ipc
    from purlin_bench.backends import procs as procs_mod
    from purlin_bench.backends.cupy import CupyBackend

    monkeypatch.setattr(ipc, "IpcWorld", _DeviceExchangingWorld)
    monkeypatch.setattr(device, "measure_copy_bandwidth", lambda devices: ("measured on", devices))
    monkeypatch.setattr(channel, "sequence", [0])
    monkeypatch.setattr(procs_mod, "_drivers", {})
    server, procs = _two_ranks(tmp_path, 10)
    codes = []
    worker = threading.Thread(target=lambda: codes.append(procs_mod.serve(procs[1])), daemon=True)
    worker.start()
    driver = procs_mod.drive(CupyBackend, procs[0])
    assert driver.copy_bandwidth() == ("measured on", (0, 0))
    # two ranks on one GPU: no NCCL (a reason for a user who asks for it), the one-kernel IPC baseline
    assert driver.baselines() == ("ipc",) and "NCCL refuses two ranks on one GPU" in driver.refused_baselines()["nccl"]
    procs_mod._send(procs[0], ("exit",))
    worker.join(10)
    assert codes == [0]
    server.close()
