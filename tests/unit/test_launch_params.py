"""Kernel parameters packed once for cuLaunchKernel (runtime/launch.py), without
a GPU: every argument at its address, of its width, as CuPy would pass it."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np

from purlin_bench.backends.cupy.runtime.launch import _pack


def _array(ptr: int):
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr))


def test_each_parameter_is_its_value_at_its_width():
    args = (_array(0x7F00_0000_1000), np.uint64(5_000_000_000), np.int32(-3), np.int32(24), np.uint64(0), _array(16))
    address, keep = _pack(args)
    params = (ctypes.c_void_p * len(args)).from_address(address)
    read = [
        ctypes.c_uint64.from_address(params[0]).value,
        ctypes.c_uint64.from_address(params[1]).value,
        ctypes.c_int32.from_address(params[2]).value,
        ctypes.c_int32.from_address(params[3]).value,
        ctypes.c_uint64.from_address(params[4]).value,
        ctypes.c_uint64.from_address(params[5]).value,
    ]
    assert read == [0x7F00_0000_1000, 5_000_000_000, -3, 24, 0, 16]
    # 32-bit arguments take 4 bytes, as the kernel's int parameters do.
    assert [ctypes.sizeof(v) for v in keep[1]] == [8, 8, 4, 4, 8, 8]


def test_the_packed_parameters_are_distinct_storage_per_call_set():
    (a, _keep_a), (b, _keep_b) = _pack((np.int32(1),)), _pack((np.int32(2),))  # kept alive while read
    assert a != b
    assert ctypes.c_int32.from_address((ctypes.c_void_p * 1).from_address(a)[0]).value == 1
    assert ctypes.c_int32.from_address((ctypes.c_void_p * 1).from_address(b)[0]).value == 2


def test_anything_else_is_refused_not_passed_as_garbage():
    import pytest

    with pytest.raises(TypeError, match="NumPy scalar or a device array"):
        _pack((7,))
