"""The floor's arithmetic: the fewest bytes, and what a write-bound fan-out can reach."""

from __future__ import annotations

import pytest

from purlin_bench.spec.roofline import fanout_share, min_bytes
from purlin_bench.spec import instantiate, load_builtin


def test_a_fan_out_reads_each_byte_once_and_writes_it_to_every_rank():
    inst = instantiate(load_builtin("all-gather"), 8, 1024, 4)
    assert min_bytes(inst) == (8 * 1024 + 8 * 8 * 1024) * 4


def test_a_fan_out_reaches_the_floor_only_where_writes_run_at_the_copys_rate():
    assert fanout_share(3e12, 3e12, 8) == pytest.approx(1.0)
    assert fanout_share(3e12, 2.7e12, 1) == pytest.approx(1.0)  # a copy is its own floor
    # writes at 90% of a copy's rate: reads are faster, and 8 of every 9 bytes are writes
    share = fanout_share(3e12, 2.7e12, 8)
    assert 0.91 < share < 0.93
    assert fanout_share(3e12, 2.7e12, 16) < share  # more consumers, more of the time is writes
    with pytest.raises(ValueError):
        fanout_share(3e12, 0, 8)
