"""`purlin check --kernel compiled` over a program the compiled kernel
refuses by its build bound: that combination is n/a (the interpreter runs it),
not an error, and the other combinations still run."""

from __future__ import annotations

from purlin_bench.backends.fake import FakeBackend
from purlin_bench.tools import check as m
from purlin_bench.base.errors import CapacityError
from purlin_bench.measure.service import MeasurementService
from purlin_bench.spec import load_builtin


class RingTooLong(FakeBackend):
    def prepare(self, program, sets=1, **params):
        if program.strategy == "ring":
            raise CapacityError("this program is too large for one compiled launch: use kernel=interpreted")
        return super().prepare(program, sets, **params)


def test_a_capacity_refusal_is_not_applicable_and_the_rest_pass():
    request = m.Request(
        (load_builtin("reduce-scatter"),), (4,), ("direct", "ring"), ("float32",), (7,), None, None, (False,)
    )
    runner = m.JobRunner(FakeBackend, seed=0)
    runner.services[4] = MeasurementService(RingTooLong(4))
    outcomes = [item if isinstance(item, m.Outcome) else runner.run(item) for item in m.expand(request)]
    by_strategy = {o.combo.strategy: o for o in outcomes}
    assert by_strategy["direct"].status == m.PASS
    ring = by_strategy["ring"]
    assert ring.status == m.NA and not ring.failed and "kernel=interpreted" in ring.note
