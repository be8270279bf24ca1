"""The port's contract: one list every registered backend passes (issue 28, item 7).

Each backend, on each rank layout it is run on here (``SITES``), is put
through the same checks, so a new backend has a list to pass and a new
layout one line to add:

* ``available()`` is None or one line; the class says what it moves;
* a program of each kind (an all-reduce, an all-gather, an all-to-all, a
  rooted collective, and ``all-gather-v`` where the backend declares
  ``variable_sizes``), prepared over two buffer sets with the backend's
  default datapath, loaded with exact inputs (different in each set), run:
  every output equals the spec's reference bit for bit, and the backend's
  own Reference counts no element wrong;
* ``candidate()`` and ``time()``: a positive time per candidate, the
  runner's beside every baseline the registry offers on that layout;
* ``close()`` is idempotent;
* a program or parameter it cannot run is refused with a PurlinError
  subclass naming why, never a crash;
* every baseline the registry offers computes the reference (where it has
  outputs to read; the others check themselves before they are timed).

The GPU sites are marked ``gpu`` and skip cleanly without one. Ranks in
processes run on the CPU reference here with two ranks on two threads of
this process (a run's real processes are test_procs.py's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from purlin_bench import baselines
from purlin_bench.backends import backend_class, make, names
from purlin_bench.backends.port import TimingPolicy, unsupported
from purlin_bench.base.dtypes import count_wrong, resolve_dtype
from purlin_bench.base.errors import ProgramError, PurlinError
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.measure.service import MeasurementService
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec.instance import Instance, instantiate
from purlin_bench.spec.loader import resolve
from purlin_bench.spec.variable import draw_counts, expected_outputs


@dataclass(frozen=True)
class Case:
    """One collective call: what the contract runs on every site."""

    collective: str
    count: int
    redop: str | None = None
    root: int = 0
    dtype: str = "float32"

    @property
    def id(self) -> str:
        return self.collective


# Counts that split unevenly over the ranks (a chunk's tail is not a whole vector).
CASES = (
    Case("all-reduce", 1001, "sum"),
    Case("all-gather", 257, dtype="int32"),
    Case("all-to-all", 129, dtype="bfloat16"),
    Case("reduce", 515, "max", root=1),
    Case("broadcast", 300, root=1),
    Case("all-gather-v", 65),
)


# -- the sites: a backend on one rank layout -----------------------------------


@dataclass(frozen=True)
class Site:
    """How to open ``backend`` on one layout: ``open(monkeypatch, tmp_path)``
    gives the backend and a function that lets go of what it started."""

    id: str
    backend: str
    open: Callable[[Any, Any], tuple[Any, Callable[[], None]]]
    gpu: bool = False


def _plain(name: str, ranks: int, gpus: tuple[int, ...] | None = None):
    def open_(monkeypatch, tmp_path):
        cls = backend_class(name)
        why = cls.available()
        if why is not None:
            pytest.skip(f"backend {name} cannot run here: {why}")
        if gpus and cls.device_count() < len(gpus):
            pytest.skip(f"backend {name} sees {cls.device_count()} devices, {len(gpus)} asked")
        return make(cls, ranks, gpus), lambda: None

    return open_


def _in_processes(name: str):
    """Rank 0's Driver over a run of two ranks, rank 1 served on a thread."""

    def open_(monkeypatch, tmp_path):
        from purlin_bench.backends import procs as procs_mod
        from purlin_bench.backends.procs import Procs
        from purlin_bench.procs import Group, Store, StoreServer, channel

        cls = backend_class(name)
        if cls.available() is not None:
            pytest.skip(f"backend {name} cannot run here: {cls.available()}")
        monkeypatch.setattr(channel, "sequence", [0])  # a fresh run's commands start at 1
        monkeypatch.setattr(procs_mod, "_drivers", {})
        token = b"c" * 32
        server = StoreServer(token)
        groups = [Group(Store(*server.address, token), r, 2, "conformance", timeout_s=20) for r in range(2)]
        procs = [Procs(g, g.rank, 2, None, tmp_path, "conformance", 20.0) for g in groups]
        worker = threading.Thread(target=procs_mod.serve, args=(procs[1],), daemon=True)
        worker.start()
        driver = procs_mod.drive(cls, procs[0])

        def close() -> None:
            procs_mod._send(procs[0], ("exit",))
            worker.join(20)
            server.close()

        return driver, close

    return open_


SITES = (
    Site("numpy", "numpy", _plain("numpy", 3)),
    Site("numpy-procs", "numpy", _in_processes("numpy")),
    Site("fake", "fake", _plain("fake", 3)),
    Site("fake-gpus", "fake", _plain("fake", 4, (0, 1, 2, 3))),
    Site("cupy", "cupy", _plain("cupy", 4), gpu=True),
    Site("cupy-gpus", "cupy", _plain("cupy", 2, (0, 1)), gpu=True),
)


def _params(items):
    return [pytest.param(s, id=s.id, marks=[pytest.mark.gpu] if s.gpu else []) for s in items]


@pytest.fixture(params=_params(SITES))
def site(request, monkeypatch, tmp_path):
    backend, close = request.param.open(monkeypatch, tmp_path)
    try:
        yield backend
    finally:
        close()


def test_every_registered_backend_has_a_site_here():
    """A new backend is added to SITES, so it runs this whole list."""
    assert {s.backend for s in SITES} == set(names())


def test_every_backend_says_whether_it_runs_and_what_it_moves():
    for name in names():
        cls = backend_class(name)
        why = cls.available()
        assert why is None or (isinstance(why, str) and why and "\n" not in why), (name, why)
        assert cls.dtypes and all(resolve_dtype(d) for d in cls.dtypes)


# -- one call through the port -------------------------------------------------


def _instance(backend, case: Case) -> Instance:
    itemsize = resolve_dtype(case.dtype)[1].itemsize
    return instantiate(resolve(case.collective), backend.ranks, case.count, itemsize, case.root)


def _program(backend, case: Case):
    inst = _instance(backend, case)
    config = MeasurementService(backend).default_config(inst)
    program = derive_program(inst, config.strategy, case.dtype, case.redop, dict(config.plan_params), False)
    return inst, program, dict(config.exec_params)


def _inputs(program, case: Case, seed: int) -> list[np.ndarray]:
    return exact_inputs(program.in_counts, resolve_dtype(case.dtype)[1], program.redop, seed)


def _runnable(backend, case: Case):
    inst, program, params = _program(backend, case)
    why = unsupported(type(backend), program)
    if why is not None:
        pytest.skip(f"not this backend's to run (the refusal is checked below): {why}")
    return inst, program, params


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_prepared_program_computes_the_reference_in_every_buffer_set(site, case):
    inst, program, params = _runnable(site, case)
    rng = np.random.default_rng(7)
    with site.guard():
        runner = site.prepare(program, 2, **params)
        try:
            wanted = []
            for slot in range(2):  # each set its own inputs (and counts): the sets do not share buffers
                inputs = _inputs(program, case, seed=slot)
                counts = draw_counts(inst, "skewed", rng) if program.variable else None
                runner.load(inputs, slot, **({} if counts is None else {"counts": counts}))
                if slot == 0:
                    reference = site.reference(runner, inst, inputs)
                wanted.append(
                    expected_outputs(inst, inputs, program.redop, counts)
                    if counts is not None
                    else inst.reference(inputs, program.redop)
                )
            for slot in (1, 0, 1):  # out of order, and again: epochs advance, nothing is reset
                runner.run(slot)
                got = runner.outputs(slot)
                assert len(got) == len(wanted[slot]) == site.ranks
                wrong = [count_wrong(g[: len(w)], w, None) for g, w in zip(got, wanted[slot])]
                assert wrong == [0] * site.ranks, f"slot {slot}: wrong elements per rank {wrong}"
            assert reference.count_wrong(runner, 0) == 0
        finally:
            runner.close()


@pytest.mark.timeout(60)
def test_candidates_are_timed_beside_every_baseline_offered_and_close_is_idempotent(site):
    case = CASES[0]
    inst, program, params = _runnable(site, case)
    inputs = _inputs(program, case, seed=0)
    offered = site.baselines()
    assert set(offered) <= set(baselines.names())
    assert not set(offered) & set(site.refused_baselines())
    with site.guard():
        runner = site.prepare(program, 2, **params)
        try:
            for slot in range(2):
                runner.load(inputs, slot)
            reference = site.reference(runner, inst, inputs)
            candidates = [runner.candidate(), *(reference.baseline(name) for name in offered)]
            times = site.time(candidates, TimingPolicy(iters=2, warmup=1, reps=2))
            assert len(times) == 1 + len(offered)
            assert all(t.median_us > 0 and len(t.samples_us) == 2 for t in times), times
        finally:
            runner.close()
        runner.close()  # a second close is a no-op, never an error


def test_an_unknown_datapath_parameter_is_refused_naming_it(site):
    _, program, _ = _program(site, CASES[0])
    with pytest.raises(ProgramError, match="no_such_knob"):
        site.prepare(program, 1, no_such_knob=3)


@pytest.mark.timeout(60)
def test_a_program_it_cannot_run_is_refused_in_one_line_not_a_crash(site):
    """What the backend declares it does not run (a dtype, sizes per call)
    is refused by the service before anything is prepared."""
    service = MeasurementService(site)
    for case in (*CASES, Case("all-gather", 64, dtype="float8_e4m3fn")):
        inst, program, _ = _program(site, case)
        why = unsupported(type(site), program)
        if why is None:
            continue  # it runs it: the tests above hold it to the reference
        assert "\n" not in why and site.name in why
        with pytest.raises(PurlinError, match="does not move|runs no variable-size"):
            service.check(inst, service.default_config(inst), case.dtype, case.redop)


def test_a_baseline_it_does_not_have_is_a_purlin_error(site):
    case = CASES[0]
    inst, program, params = _runnable(site, case)
    inputs = _inputs(program, case, seed=0)
    with site.guard():
        runner = site.prepare(program, 1, **params)
        try:
            runner.load(inputs, 0)
            reference = site.reference(runner, inst, inputs)
            with pytest.raises(PurlinError, match="baseline 'no-such-baseline'"):
                reference.baseline("no-such-baseline")
        finally:
            runner.close()


# -- the baselines: the registry's every entry ---------------------------------


def _numpy_outputs(candidate, reference):
    return candidate.call(0)


def _cupy_outputs(candidate, reference):
    import cupy

    return [cupy.asnumpy(x) for x in reference.direct.outputs]


def _torch_outputs(candidate, reference):
    return reference.kept["torch"].outputs()


def _nccl_outputs(candidate, reference):
    import cupy

    outs = reference.kept["nccl"].outputs
    return [cupy.asnumpy(outs[r][: n * reference.inst.itemsize]) for r, n in enumerate(reference.inst.out_counts)]


# Where a baseline's outputs are read after one call (compared with the
# reference here), or why they are not: each registered baseline says one.
OUTPUTS: dict[str, Callable[[Any, Any], list[np.ndarray]]] = {
    "numpy": _numpy_outputs,
    "cupy": _cupy_outputs,
    "torch": _torch_outputs,
    "nccl": _nccl_outputs,
}
NO_OUTPUTS = {
    "plain": "a modelled clock: the fake device's baseline computes nothing",
    "ipc": "one process per rank on GPUs only; IpcBaseline.check compares it with the reference before it is timed",
}


def test_every_registered_baseline_says_where_it_runs_and_how_it_is_checked():
    for name in baselines.names():
        entry = baselines.get(name)
        assert entry.name == name and entry.description and entry.backend in names()
        assert entry.layouts and all(x in baselines.LAYOUTS for x in (*entry.layouts, *entry.refusals))
        assert not set(entry.layouts) & set(entry.refusals), name
        assert (name in OUTPUTS) != (name in NO_OUTPUTS), f"say how baseline {name} is checked here"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES[:5], ids=lambda c: c.id)
def test_every_baseline_offered_computes_the_reference(site, case):
    inst, program, params = _runnable(site, case)
    offered = [name for name in site.baselines() if name in OUTPUTS]
    if not offered:
        pytest.skip(f"no baseline with outputs to read on {site.describe()}")
    inputs = _inputs(program, case, seed=3)
    want = inst.reference(inputs, program.redop)
    with site.guard():
        runner = site.prepare(program, 1, **params)
        try:
            runner.load(inputs, 0)
            reference = site.reference(runner, inst, inputs)
            for name in offered:
                try:
                    candidate = reference.baseline(name)
                except PurlinError as exc:  # e.g. nccl has no call for a user's collective: refused, not wrong
                    pytest.skip(f"baseline {name}: {exc}")
                site.time([candidate], TimingPolicy(iters=1, warmup=1, reps=1))
                got = OUTPUTS[name](candidate, reference)
                storage = [np.asarray(g).view(w.dtype).reshape(-1) for g, w in zip(got, want)]
                wrong = [count_wrong(g, w, None) for g, w in zip(storage, want)]
                assert wrong == [0] * len(want), f"baseline {name}: wrong elements per rank {wrong}"
        finally:
            runner.close()


@pytest.mark.parametrize("torch_here", [True, False])
def test_each_layout_offers_its_baselines_strongest_first_and_says_why_not(monkeypatch, torch_here):
    """The registry's table, as bench and tune read it: which baselines each
    layout times (the first is `--baseline auto` and a plan's record), and
    which it refuses with a reason a user who asks for one is told."""
    from purlin_bench.baselines import GPUS, PROCS, PROCS_SHARED, VIRTUAL, torch_code

    monkeypatch.setattr(torch_code, "find_spec", lambda name: object() if torch_here else None)
    assert baselines.offered("cupy", VIRTUAL) == (("torch", "cupy") if torch_here else ("cupy",))
    assert baselines.offered("cupy", GPUS) == ("nccl",)
    assert baselines.offered("cupy", PROCS) == ("nccl", "ipc")
    assert baselines.offered("cupy", PROCS_SHARED) == ("ipc",)
    assert baselines.refused("cupy", PROCS_SHARED) == {
        "nccl": "NCCL refuses two ranks on one GPU (one process per GPU runs it)"
    }
    assert all(not baselines.refused("cupy", x) for x in (VIRTUAL, GPUS, PROCS))
    assert baselines.offered("numpy", VIRTUAL) == ("numpy",) and baselines.offered("numpy", PROCS) == ()
    assert baselines.offered("fake", VIRTUAL) == baselines.offered("fake", GPUS) == ("plain",)
