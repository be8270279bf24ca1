"""CupyBackend.warm_up without a GPU: which kernel variants it builds (the
compiler is replaced by a recorder)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen import atoms


@pytest.mark.parametrize(("devices", "sys_scope"), [((0, 0, 0, 0), False), ((0, 1), True)])
def test_every_unroll_block_size_and_build_on_every_device(monkeypatch, devices, sys_scope):
    built = []
    monkeypatch.setattr(atoms, "snac_kernel", lambda *args: built.append(args))
    backend = CupyBackend(len(devices), devices)
    backend._world = SimpleNamespace(devices=devices, sys_scope=sys_scope)
    count = backend.warm_up("bfloat16", None)
    assert count == len(built) == 3 * 3 * 2 * len(set(devices))
    assert {(a[0], a[1]) for a in built} == {("bfloat16", "sum")}
    assert {a[2] for a in built} == {1, 2, 4} and {a[3] for a in built} == {128, 256, 512}
    assert {a[4] for a in built} == set(devices) and {a[5] for a in built} == {sys_scope}
    assert {a[6] for a in built} == {False, True} and {a[7] for a in built} == {()}


def test_kernel_settings_become_the_builds_defines(monkeypatch):
    from purlin_bench.backends.cupy.runtime.runner import KernelSettings

    assert KernelSettings().defines() == ()
    # the test mode's jitter is the only switch left, and it reaches every build
    jittery = KernelSettings(jitter_ns=2000, jitter_seed=7)
    assert (
        jittery.defines()
        == jittery.defines(copy_only=True, threads=128)
        == ("-DPURLIN_JITTER_NS=2000", "-DPURLIN_JITTER_SEED=7")
    )
    # the warm-up builds the variants a backend with those settings runs
    built = []
    backend = CupyBackend(2, settings=jittery)
    backend._world = SimpleNamespace(devices=(0, 0), sys_scope=False)
    monkeypatch.setattr(atoms, "snac_kernel", lambda *args: built.append(args))
    backend.warm_up("float32", "sum")
    assert {a[7] for a in built} == {("-DPURLIN_JITTER_NS=2000", "-DPURLIN_JITTER_SEED=7")}


def test_jitter_comes_from_the_environment_checked():
    from purlin_bench.backends.cupy.runtime.runner import KernelSettings
    from purlin_bench.base.errors import PurlinError

    assert KernelSettings.from_environ({}) == KernelSettings()
    assert KernelSettings.from_environ({"PURLIN_JITTER": "500", "PURLIN_JITTER_SEED": "3"}) == KernelSettings(
        jitter_ns=500, jitter_seed=3
    )
    # every process of a run reads the same variables, so a backend made without settings takes them
    for bad in ("-1", "abc", "2000000", "1e3"):
        with pytest.raises(PurlinError, match="PURLIN_JITTER must be an integer"):
            KernelSettings.from_environ({"PURLIN_JITTER": bad})
