"""Hardware fingerprints: slugs, the numpy fingerprint, and the cupy branch
against a fake CuPy module (CuPy is not installed on CI machines)."""

from __future__ import annotations

import sys
import types

import pytest

import purlin_bench.base.hardware as hardware
from purlin_bench.base.errors import PurlinError
from purlin_bench.backends import detect
from purlin_bench.base.hardware import Fingerprint, gpu_type_slug, layout_slug


@pytest.mark.parametrize(
    "name,slug",
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("", "unknown-gpu"),
    ],
)
def test_gpu_type_slug(name, slug):
    assert gpu_type_slug(name) == slug


def test_layout_slug():
    assert layout_slug(8, 1, False) == "8vr"
    assert layout_slug(8, 8, True) == "nvlink-8"
    assert layout_slug(4, 4, False) == "pcie-4"


def test_module_does_not_import_cupy():
    assert "cupy" not in vars(hardware)


def test_numpy_fingerprint_is_a_cpu_reference():
    fp = detect("numpy", 8)
    assert (fp.backend, fp.gpu_type, fp.layout, fp.ranks) == ("numpy", "cpu", "8vr", 8)
    assert fp.cpu_model and fp.device_name == fp.cpu_model
    assert fp.compute_capability is None and fp.devices == ()
    assert Fingerprint.from_dict(fp.to_dict()) == fp


def test_unknown_backend():
    with pytest.raises(PurlinError, match="unknown backend 'tpu'"):
        detect("tpu", 8)


def _fake_cupy(peer: bool = True, fail: bool = False) -> types.ModuleType:
    """Just the part of cupy.cuda.runtime the fingerprint reads."""

    class Runtime:
        @staticmethod
        def getDeviceProperties(device):
            if fail:
                raise RuntimeError("cudaErrorNoDevice")
            return {
                "name": b"NVIDIA H200",
                "major": 9,
                "minor": 0,
                "multiProcessorCount": 132,
                "totalGlobalMem": 150_000_000_000,
            }

        @staticmethod
        def driverGetVersion():
            return 13000

        @staticmethod
        def runtimeGetVersion():
            return 12080

        @staticmethod
        def deviceCanAccessPeer(a, b):
            return peer

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=Runtime)
    return cupy


def test_cupy_virtual_ranks(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    fp = detect("cupy", 8)
    assert (fp.gpu_type, fp.layout, fp.ranks, fp.devices) == ("h200", "8vr", 8, (0,))
    assert fp.device_name == "NVIDIA H200"
    assert (fp.compute_capability, fp.sm_count, fp.memory_bytes) == ("9.0", 132, 150_000_000_000)
    assert (fp.driver_version, fp.cuda_runtime_version) == ("13.0", "12.8")
    assert "virtual ranks" in fp.link


def test_cupy_one_rank_per_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(peer=True))
    fp = detect("cupy", 99, gpus=(0, 1, 2, 3, 4, 5, 6, 7))
    assert (fp.layout, fp.ranks, fp.devices) == ("nvlink-8", 8, tuple(range(8)))
    assert "peer access" in fp.link
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(peer=False))
    assert detect("cupy", 2, gpus=(0, 1)).layout == "pcie-2"


def test_cupy_errors_are_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(fail=True))
    with pytest.raises(PurlinError, match="cannot read the GPU's properties .*cudaErrorNoDevice"):
        detect("cupy", 8)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    with pytest.raises(PurlinError, match="needs CuPy"):
        detect("cupy", 8)


def test_differences_name_what_differs():
    here = Fingerprint("cupy", "h200", "8vr", 8, "", "NVIDIA H200")
    other = Fingerprint("cupy", "a100", "nvlink-8", 8, "", "NVIDIA A100")
    assert here.differences(here) == []
    diffs = here.differences(other)
    assert any("GPU type h200" in d and "a100" in d for d in diffs)
    assert any("rank layout 8vr vs nvlink-8" in d for d in diffs)


def test_a_layout_of_ranks_in_processes_is_told_from_the_others():
    from purlin_bench.base.hardware import is_procs_layout, layout_slug, procs_layout_slug

    assert all(is_procs_layout(procs_layout_slug(n, g)) for n in (2, 8, 16) for g in (None, 1, 8))
    assert not any(is_procs_layout(layout_slug(8, g, peer)) for g in (1, 8) for peer in (False, True))
    assert not is_procs_layout("2proc-") and not is_procs_layout("x2proc-1gpu")
