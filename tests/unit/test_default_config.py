"""The untuned default is derived from the dataflow, and always applies."""

from __future__ import annotations

import pytest

from purlin_bench.backends import backend_class
from purlin_bench.strategies.default import untuned_config, default_strategy
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.strategies import STRATEGIES

EXPECTED_AT_8 = {
    "all-reduce": "two-shot",
    "reduce": "two-shot",
    "reduce-scatter": "direct",
    "all-gather": "push",
    "gather": "push",
    "all-to-all": "push",
    "broadcast": "two-shot",
    "scatter": "direct",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_AT_8))
def test_default_strategy_follows_the_dataflow(name):
    assert default_strategy(instantiate(load_builtin(name), 8, 4096, 4)) == EXPECTED_AT_8[name]


@pytest.mark.parametrize("spec", load_all_builtin(), ids=lambda s: s.name)
def test_default_config_always_plans(spec):
    for ranks in (1, 2, 3, 8):
        inst = instantiate(spec, ranks, 1001, 2, root=ranks - 1 if spec.rooted else 0)
        config = untuned_config(inst)
        assert config.strategy in STRATEGIES
        assert derive_program(inst, config.strategy, "bfloat16", params=dict(config.plan_params)).ranks == ranks


def test_renaming_a_spec_does_not_change_the_choice():
    import dataclasses

    spec = load_builtin("reduce-scatter")
    renamed = dataclasses.replace(spec, name="my-collective")
    assert default_strategy(instantiate(renamed, 8, 64, 4)) == default_strategy(instantiate(spec, 8, 64, 4))


def default_config(inst, backend="cupy", fused=True):
    """The default as a backend completes the heuristics' choice (made
    without a GPU: the class is read, no device is touched)."""
    ranks = inst.ranks
    chosen = backend_class(backend)(ranks, None if fused else tuple(range(ranks)))
    return chosen.default_config(inst, untuned_config(inst))


def _at(name, nbytes, itemsize=4, ranks=8, distribution="uniform"):
    from purlin_bench.tools.bench.run import instances

    dtype = {4: "float32", 2: "bfloat16"}[itemsize]
    ((_, inst, _),) = instances(load_builtin(name), [nbytes], ranks, dtype, 0, distribution)
    return inst


def test_the_heuristics_choose_strategies_only():
    assert untuned_config(_at("all-gather", 1 << 20)).exec_params == ()
    assert untuned_config(_at("all-to-all", 256 << 20)).exec_params == ()


def test_copies_get_four_vectors_in_flight_reductions_keep_the_executor_default():
    assert dict(default_config(_at("all-gather", 1 << 30)).exec_params) == {"unroll": 4}
    assert dict(default_config(_at("all-reduce", 1 << 30)).exec_params) == {}
    assert dict(default_config(_at("all-gather", 1 << 20)).exec_params) == {"unroll": 4, "kernel": "compiled"}
    assert dict(default_config(_at("all-reduce", 1 << 20)).exec_params) == {"kernel": "compiled"}
    # the numpy reference takes no datapath parameters
    assert default_config(_at("all-gather", 1 << 20), backend="numpy").exec_params == ()


def test_one_gpu_gets_the_compiled_kernel_up_to_its_bound_and_128_threads_for_small_messages():
    from purlin_bench.backends.cupy.defaults import DEFAULTS

    COMPILED_MAX_BYTES, COMPILED_SMALL_BYTES = DEFAULTS.compiled_max_bytes, DEFAULTS.compiled_small_bytes

    compiled = {"kernel": "compiled", "threads": 128}
    for name in ("all-reduce", "reduce-scatter", "all-gather", "broadcast", "scatter"):
        for nbytes in (8, 4096, COMPILED_SMALL_BYTES):
            assert dict(default_config(_at(name, nbytes)).exec_params).items() >= compiled.items(), (name, nbytes)
        # mid sizes: compiled at the executor's threads (512)
        for nbytes in (2 * COMPILED_SMALL_BYTES, 1 << 20, COMPILED_MAX_BYTES):
            mid = dict(default_config(_at(name, nbytes)).exec_params)
            assert mid.get("kernel") == "compiled" and "threads" not in mid, (name, nbytes, mid)
        # past the bound, and with a launch per rank (several GPUs, processes): the interpreter
        assert "kernel" not in dict(default_config(_at(name, 2 * COMPILED_MAX_BYTES)).exec_params)
        assert "kernel" not in dict(default_config(_at(name, 4096), fused=False).exec_params)
    assert dict(default_config(_at("all-gather", 4096)).exec_params) == {"unroll": 4, **compiled}
    # past the ranks it was measured at (and where nvcc's sample of its builds stops)
    from purlin_bench.backends.cupy.defaults import DEFAULTS

    COMPILED_MAX_RANKS = DEFAULTS.compiled_max_ranks
    from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, build_weight
    from purlin_bench.backends.cupy.codegen.lower import flag_id, lower
    from purlin_bench.strategies.derive import derive_program

    for ranks in (COMPILED_MAX_RANKS, 2 * COMPILED_MAX_RANKS + 1):
        inst = _at("all-to-all", 4096, ranks=ranks)
        config = default_config(inst)
        program = derive_program(inst, config.strategy, "float32", None, dict(config.plan_params), False)
        weight = build_weight(lower(program, list(range(ranks)), True, "sm", flag_id))
        assert (dict(config.exec_params).get("kernel") == "compiled") == (ranks <= COMPILED_MAX_RANKS)
        assert weight <= MAX_BUILD_WEIGHT or ranks > COMPILED_MAX_RANKS
    assert dict(default_config(_at("all-reduce", 4096, itemsize=2)).exec_params) == compiled


def test_a_users_small_slices_keep_the_default_on_the_interpreter_past_the_op_bound():
    """bench --strategy auto --slice-bytes 16 at 64 KiB: thousands of ops,
    which the compiled kernel refuses; the default must still run."""
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, build_weight
    from purlin_bench.backends.cupy.codegen.lower import flag_id, lower
    from purlin_bench.tools.bench.run import Choice, configs_for
    from purlin_bench.measure.service import MeasurementService
    from purlin_bench.strategies.derive import derive_program

    service = MeasurementService(CupyBackend(8))
    for name, slices in (("all-gather", 16), ("all-to-all", 64), ("all-reduce", 1 << 20)):
        inst = _at(name, 64 << 10)
        (config,) = configs_for(inst, 64 << 10, Choice("auto", {"slice_bytes": slices}, {}), service.default_config)
        assert dict(config.plan_params)["slice_bytes"] == slices
        program = derive_program(
            inst, config.strategy, "float32", "sum" if inst.op == "reduce" else None, dict(config.plan_params), False
        )
        fits = build_weight(lower(program, list(range(8)), True, "sm", flag_id)) <= MAX_BUILD_WEIGHT
        assert (dict(config.exec_params).get("kernel") == "compiled") == fits, (name, slices)
        assert fits == (name == "all-reduce")
    # and an explicit choice is the user's: --kernel interpreted wins over the default
    (config,) = configs_for(
        _at("all-gather", 4096), 4096, Choice("auto", {}, {"kernel": "interpreted"}), service.default_config
    )
    assert dict(config.exec_params)["kernel"] == "interpreted"


def test_reductions_past_the_datapaths_sources_per_step_default_to_a_ring():
    from purlin_bench.backends.cupy.codegen.lower import MAX_SRC, flag_id, lower
    from purlin_bench.strategies.derive import derive_program

    for name in ("all-reduce", "reduce-scatter", "reduce"):
        assert default_config(_at(name, 4096, ranks=MAX_SRC)).strategy != "ring"
        for fused in (True, False):
            inst = _at(name, 4096, ranks=MAX_SRC + 8)
            config = default_config(inst, fused=fused)
            assert config.strategy == "ring", (name, fused)
            program = derive_program(inst, config.strategy, "float32", "sum", dict(config.plan_params), False)
            assert len(
                lower(program, list(range(inst.ranks)), True, "sm", flag_id).ops
            )  # it lowers: no step past MAX_SRC sources


def test_a_rank_sending_several_flows_gets_a_channel_per_flow():
    config = default_config(_at("all-to-all", 64 << 10))
    assert dict(config.plan_params)["channels"] == 8
    assert dict(default_config(_at("gather", 64 << 10)).plan_params)["channels"] == 1


def test_copy_engines_take_large_single_consumer_flows_on_one_gpu_only():
    big = _at("all-to-all", 256 << 20)  # 32 MiB per flow
    assert default_config(big).exec_params == (("datapath", "ce"),)
    assert dict(default_config(big).plan_params)["channels"] == 1
    assert dict(default_config(big, fused=False).exec_params) == {"unroll": 4}
    # just under the threshold per flow: the SM datapath
    from purlin_bench.backends.cupy.defaults import DEFAULTS

    CE_MIN_FLOW_BYTES = DEFAULTS.ce_min_flow_bytes

    under = _at("all-to-all", 8 * (CE_MIN_FLOW_BYTES // 2))
    assert dict(default_config(under).exec_params) == {"unroll": 4, "kernel": "compiled"}
    # a fan-out copy (all-gather) and a pulled one (scatter) stay on SMs
    assert "datapath" not in dict(default_config(_at("all-gather", 1 << 30)).exec_params)
    assert "datapath" not in dict(default_config(_at("scatter", 1 << 30)).exec_params)


@pytest.mark.parametrize("name", ("all-gather-v", "reduce-scatter-v", "all-to-all-v"))
def test_variable_sizes_default_to_the_compiled_kernel_on_sms(name):
    """Copy engines fix sizes when a call is enqueued; sizes that come per
    call stay on SMs (D44) at every size (all-to-all at 256 MiB would
    otherwise take 'ce'). On one GPU the compiled kernel reads them at every
    size where its blocks pool over every op (D46, D53: all-gather-v and
    reduce-scatter-v; the interpreter's cannot), up to D12's bound where they
    do not (all-to-all-v's 64 ops); with a launch per GPU, the interpreter
    past it (no launch pools across GPUs)."""
    for nbytes in (8, 1 << 20, 256 << 20):
        params = dict(default_config(_at(name, nbytes)).exec_params)
        compiled = name != "all-to-all-v" or nbytes < 256 << 20
        assert params.get("datapath", "sm") == "sm", params
        assert (params.get("kernel") == "compiled") == compiled, (nbytes, params)
    # a named strategy whose launch waits on flags pools nothing: the interpreter past D12's bound
    from purlin_bench.base.config import RunConfig

    gpu, ring = backend_class("cupy")(8, None), RunConfig.make("ring", {})
    assert "kernel" not in dict(gpu.default_config(_at(name, 256 << 20), ring).exec_params)
    params = dict(default_config(_at(name, 256 << 20), fused=False).exec_params)
    assert params.get("datapath", "sm") == "sm" and "kernel" not in params, params


def test_a_large_variable_all_to_all_takes_one_channel_a_small_one_a_channel_per_flow():
    """D45: skewed flows leave a channel per flow mostly idle at large sizes."""
    assert dict(untuned_config(_at("all-to-all-v", 16 << 20)).plan_params)["channels"] == 1
    assert dict(untuned_config(_at("all-to-all-v", 4096)).plan_params)["channels"] == 8
    assert dict(untuned_config(_at("all-to-all", 16 << 20)).plan_params)["channels"] == 8  # fixed sizes: as before


def test_the_one_channel_bound_of_a_variable_all_to_all_sits_between_the_rows_timed():
    """D50, 8 virtual ranks: one channel won at skewed 512 KiB S (2.7 MiB of rank input at capacity),
    eight at skewed 256 KiB (1.2 MiB) and uniform 512 KiB-1 MiB (0.9-2.0 MiB)."""
    def channels(nbytes, distribution):
        return dict(untuned_config(_at("all-to-all-v", nbytes, distribution=distribution)).plan_params)["channels"]

    assert channels(512 << 10, "skewed") == 1 and channels(2 << 20, "skewed") == 1
    assert channels(256 << 10, "skewed") == 8
    assert channels(512 << 10, "uniform") == 8 and channels(1 << 20, "uniform") == 8


def test_a_named_strategy_runs_on_the_backends_datapath_defaults_for_it():
    """bench --strategy two-shot at --procs 8 timed the interpreter where the
    default compiles (31 us a row against the compiled default's 13 us, session
    17 on the H200): a named strategy gets the datapath its default would, the
    user's --kernel still wins, and the strategy stays the one named."""
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.measure.service import MeasurementService
    from purlin_bench.tools.bench.run import Choice, configs_for

    service = MeasurementService(CupyBackend(8))
    inst = _at("all-reduce", 4096)
    configs = configs_for(inst, 4096, Choice("all"), service.default_config)
    assert [c.strategy for c in configs] == list(STRATEGIES)
    for config in configs:
        assert dict(config.exec_params).get("kernel") == "compiled", config
    (config,) = configs_for(
        inst, 4096, Choice("direct", {"channels": 2}, {"kernel": "interpreted"}), service.default_config
    )
    assert (config.strategy, dict(config.exec_params)["kernel"]) == ("direct", "interpreted")
    assert dict(config.plan_params)["channels"] == 2


def test_a_parity_program_prepared_without_a_kernel_runs_compiled(monkeypatch):
    """check --strategy push-parity asks for no datapath; the interpreter
    refuses parity scratch, so the backend gives the program the compiled one
    (and an explicit --kernel interpreted is still refused by the runner)."""
    import purlin_bench.backends.cupy as cupy_backend

    made = []
    monkeypatch.setattr(cupy_backend, "CupyRunner", lambda world, program, **kw: made.append(kw) or kw)
    monkeypatch.setattr(cupy_backend.CupyBackend, "world", None)  # no GPU: nothing is allocated
    backend = cupy_backend.CupyBackend(8)
    inst = _at("all-reduce", 4096)
    parity = derive_program(inst, "push-parity", "float32", "sum")
    plain = derive_program(inst, "push", "float32", "sum")
    assert parity.parity_scratch and not plain.parity_scratch
    backend.prepare(parity)
    backend.prepare(plain)
    backend.prepare(parity, kernel="interpreted")
    assert [kw["kernel"] for kw in made] == ["compiled", "interpreted", "interpreted"]


def test_processes_take_push_parity_for_a_small_all_reduce_and_reduce_scatter():
    """D47: with ranks as processes a small all-reduce or reduce-scatter is
    one flag exchange a call (push-parity); virtual ranks, fewer elements than
    ranks, sizes past the bound measured, a rooted reduce and the rest keep
    their defaults."""
    from purlin_bench.strategies.default import PROCS_PARITY_MAX_BYTES

    assert default_strategy(_at("all-reduce", 4096), processes=True) == "push-parity"
    assert default_strategy(_at("all-reduce", 4096, ranks=2), processes=True) == "push-parity"
    assert default_strategy(_at("all-reduce", 8, ranks=2), processes=True) == "push-parity"  # one element a rank
    assert default_strategy(_at("all-reduce", 8), processes=True) == "two-shot"  # 2 elements on 8 ranks
    assert default_strategy(_at("all-reduce", PROCS_PARITY_MAX_BYTES), processes=True) == "push-parity"
    assert default_strategy(_at("all-reduce", 2 * PROCS_PARITY_MAX_BYTES), processes=True) == "two-shot"
    assert default_strategy(_at("all-reduce", 4096)) == "two-shot"
    assert default_strategy(_at("reduce-scatter", 4096), processes=True) == "push-parity"
    assert default_strategy(_at("reduce-scatter", 64, ranks=2), processes=True) == "push-parity"
    assert default_strategy(_at("reduce-scatter", 2 * PROCS_PARITY_MAX_BYTES), processes=True) == "direct"
    assert default_strategy(_at("reduce-scatter", 4096)) == "direct"
    for name in ("reduce", "all-gather", "reduce-scatter-v", "all-to-all", "broadcast"):
        assert default_strategy(_at(name, 4096), processes=True) == default_strategy(_at(name, 4096)), name


def test_the_service_asks_for_the_process_default_where_ranks_are_processes(monkeypatch):
    """Whether ranks are processes comes from the port's ``procs``, not from
    rank_layout(): the cupy driver of a --procs run has no world to ask
    whether its ranks share a GPU (an AttributeError on the H200, session 17)."""
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.measure.service import MeasurementService

    def no_world(self):
        raise AttributeError("'CupyBackendProcs' object has no attribute '_world'")

    monkeypatch.setattr(CupyBackend, "world", property(no_world))
    inst = _at("all-reduce", 4096)
    from types import SimpleNamespace

    for procs, expected in ((None, "two-shot"), (SimpleNamespace(watchdog_s=10.0), "push-parity")):
        config = MeasurementService(CupyBackend(8, procs=procs)).default_config(inst)
        assert config.strategy == expected, procs
        assert dict(config.exec_params).get("kernel") == "compiled"  # parity scratch runs compiled only


def test_a_kernel_asked_for_runs_on_sms_even_where_the_default_takes_copy_engines():
    """bench all-to-all --strategy push --kernel compiled at 64 MiB: the
    default's stages go to copy engines there (D5); the user asked for a
    kernel, so the row runs it on SMs (a review found it on copy engines)."""
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.measure.service import MeasurementService
    from purlin_bench.tools.bench.run import Choice, configs_for

    service = MeasurementService(CupyBackend(8))
    inst = _at("all-to-all", 64 << 20)
    for strategy in ("push", "auto"):
        (plain,) = configs_for(inst, 64 << 20, Choice(strategy), service.default_config)
        assert dict(plain.exec_params).get("datapath") == "ce", strategy  # the default's choice, kept
        (asked,) = configs_for(inst, 64 << 20, Choice(strategy, {}, {"kernel": "compiled"}), service.default_config)
        assert "datapath" not in dict(asked.exec_params) and dict(asked.exec_params)["kernel"] == "compiled"
        (both,) = configs_for(
            inst, 64 << 20, Choice(strategy, {}, {"kernel": "compiled", "datapath": "ce"}), service.default_config
        )
        assert dict(both.exec_params)["datapath"] == "ce"
