"""The NCCL baseline's calls compute each collective's reference semantics.

A tiny NumPy stand-in for NCCL's grouped semantics runs the calls that
nccl_calls lists, so the mapping is checked without GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.base.inputs import exact_inputs
from purlin_bench.backends.cupy.baselines.nccl import NCCL_DTYPES, nccl_calls
from purlin_bench.base.dtypes import accumulate, resolve_dtype
from purlin_bench.base.errors import PurlinError
from purlin_bench.spec import instantiate, load_all_builtin, load_spec_file

# The built-ins of fixed sizes (no baseline of sizes per call yet).
FIXED = [s for s in load_all_builtin() if not s.variable]

OPS = {0: "sum", 1: "prod", 2: "max", 3: "min"}


def _run_group(calls, inst, inputs, dtype):
    R, size = inst.ranks, inst.itemsize
    outs = [np.zeros(n, dtype=dtype) for n in inst.out_counts]

    def view(buf, n):
        rank, which, offset = buf
        array = inputs[rank] if which == "in" else outs[rank]
        return array[offset // size : offset // size + n]

    by_method: dict[str, list] = {}
    for call in calls:
        by_method.setdefault(call.method, []).append(call)
    for method, group in by_method.items():
        if method == "allReduce":
            total = accumulate([view(c.args[0], c.args[2]) for c in group], OPS[group[0].args[4]]).astype(dtype)
            for c in group:
                view(c.args[1], c.args[2])[...] = total
        elif method == "allGather":
            joined = np.concatenate([view(c.args[0], c.args[2]) for c in sorted(group, key=lambda c: c.rank)])
            for c in group:
                view(c.args[1], c.args[2] * R)[...] = joined
        elif method == "reduceScatter":
            n = group[0].args[2]
            total = accumulate([view(c.args[0], n * R) for c in group], OPS[group[0].args[4]]).astype(dtype)
            for c in group:
                view(c.args[1], n)[...] = total[c.rank * n : (c.rank + 1) * n]
        elif method == "broadcast":
            root = group[0].args[4]
            data = view(next(c for c in group if c.rank == root).args[0], group[0].args[2]).copy()
            for c in group:
                view(c.args[1], c.args[2])[...] = data
        elif method == "reduce":
            root = group[0].args[5]
            total = accumulate([view(c.args[0], c.args[2]) for c in group], OPS[group[0].args[4]]).astype(dtype)
            view(next(c for c in group if c.rank == root).args[1], group[0].args[2])[...] = total
        elif method in ("send", "recv"):
            continue
        else:
            raise AssertionError(f"unexpected NCCL method {method}")
    sends = {(c.rank, c.args[3]): c for c in by_method.get("send", [])}
    for c in by_method.get("recv", []):
        send = sends.pop((c.args[3], c.rank))  # every recv has its matching send
        assert send.args[1] == c.args[1]
        view(c.args[0], c.args[1])[...] = view(send.args[0], send.args[1])
    assert not sends, f"unmatched sends: {sorted(sends)}"
    return outs


@pytest.mark.parametrize("spec", FIXED, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_nccl_calls_compute_the_reference(spec, dtype):
    _, np_dtype = resolve_dtype(dtype)
    for ranks in (1, 2, 5, 8):
        for root in range(ranks) if spec.rooted else (0,):
            # NCCL splits all-reduce by bytes, not by our chunks: any count works.
            inst = instantiate(spec, ranks, 37, np_dtype.itemsize, root)
            redop = spec.redop
            inputs = exact_inputs(inst.in_counts, np_dtype, redop, seed=ranks + root)
            outs = _run_group(nccl_calls(inst, dtype, redop), inst, inputs, np_dtype)
            for got, want in zip(outs, inst.reference(inputs, redop)):
                np.testing.assert_array_equal(got, want)


def test_nccl_types_and_unknown_collectives():
    assert set(NCCL_DTYPES) == {"int32", "float16", "float32", "float64", "bfloat16"}
    shift = load_spec_file("examples/ring-shift.yaml")
    with pytest.raises(PurlinError, match="no NCCL baseline"):
        nccl_calls(instantiate(shift, 4, 8, 4), "float32", None)
