"""The torch baseline on a real GPU: for every built-in collective and the
ring-shift example, at several rank counts, dtypes and reductions, one call's
outputs equal the NumPy reference's bit for bit (the bench checks it against
the CuPy baseline's outputs; this checks it against the spec). Marked `gpu`;
skipped where torch is missing."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.spec import instantiate
from tests.unit.test_torch_baseline_plan import SPECS  # the built-ins and the ring-shift example

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_one_call_matches_the_reference(spec):
    from purlin_bench.backends.cupy.baselines.torch_code import TorchBaseline

    cases = [
        (8, 65536 + 3, "float32", "sum"),
        (3, 1001, "bfloat16", "sum"),
        (2, 1, "int32", "sum"),
        (8, 4099, "float16", "max"),
        (4, 777, "float32", "prod"),
    ]
    for ranks, count, dtype, redop in cases:
        storage = resolve_dtype(dtype)[1]
        inst = instantiate(spec, ranks, count, storage.itemsize, ranks - 1 if spec.rooted else 0)
        op = redop if inst.op == "reduce" else None
        inputs = exact_inputs(inst.in_counts, storage, op, seed=ranks)
        want = inst.reference(inputs, op)
        baseline = TorchBaseline(inst, inputs, dtype, op, 2, 0)
        for slot in (0, 1):  # both buffer sets hold the same inputs
            baseline.y.fill_(0)
            baseline.run(slot)
            torch.cuda.synchronize()
            width = {2: np.uint16, 4: np.uint32}[storage.itemsize]
            for rank, (got, ref) in enumerate(zip(baseline.outputs(), want)):
                assert np.array_equal(np.asarray(got).view(width), np.asarray(ref).view(width)), (
                    f"{spec.name} R={ranks} {dtype} {redop} rank {rank} ({baseline.describe()})"
                )
