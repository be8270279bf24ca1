"""CupyBackend.warm_up without a GPU: which kernel variants it builds (the
compiler is replaced by a recorder)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from purlin_bench.backends.cupy import CupyBackend, atoms


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
    from purlin_bench.backends.cupy.executor import KernelSettings

    assert KernelSettings().defines() == ()
    assert KernelSettings(ld_hint=".L2::256B", st_hint=".cs", short_reduce=False, shared_bases=False, short_batch=1, pipeline=True).defines() == (
        '-DPURLIN_LD_HINT=".L2::256B"', '-DPURLIN_ST_HINT=".cs"', "-DPURLIN_SHORT_REDUCE=0", "-DPURLIN_SHARED_BASES=0", "-DSHORT_BATCH=1", "-DPURLIN_PIPELINE=1",
    )
    # the copies' occupancy bound reaches copy-only builds only, scaled to the block size
    wide = KernelSettings(copy_sm_threads=1024)
    assert wide.defines(copy_only=True, threads=512) == ("-DPURLIN_MIN_BLOCKS=2",)
    assert wide.defines(copy_only=True, threads=128) == ("-DPURLIN_MIN_BLOCKS=8",)
    assert wide.defines(copy_only=False, threads=512) == () and KernelSettings().defines(True, 512) == ()
    assert (wide.blocks_per_sm(512, True), wide.blocks_per_sm(512, False), KernelSettings().blocks_per_sm(128, True)) == (2, 1, 4)
    # the warm-up builds the variants a backend with those settings runs
    built = []
    backend = CupyBackend(2, settings=KernelSettings(shared_bases=False))
    backend._world = SimpleNamespace(devices=(0, 0), sys_scope=False)
    monkeypatch.setattr(atoms, "snac_kernel", lambda *args: built.append(args))
    backend.warm_up("float32", "sum")
    assert {a[7] for a in built} == {("-DPURLIN_SHARED_BASES=0",)}
