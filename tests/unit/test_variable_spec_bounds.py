"""Hostile or mistaken ``count: variable`` specs (audit 26): what they cost to
load, what a draw of their counts allocates, and the specs that loaded but made
bench or tune crash, now refused at load in one line."""

from __future__ import annotations

import pickle
import tracemalloc

from purlin_bench.spec import Place, instantiate
from purlin_bench.spec.instance import Prefix
from purlin_bench.spec.loader import parse_spec


def _spec(inputs, outputs, **extra) -> dict:
    return {"name": "my-v", "op": "copy", "count": "variable", "input": inputs, "output": outputs, **extra}


def _wide(n: int, **extra) -> dict:
    entry = {"chunk": "c(r, i)", "for": f"i in range({n})"}
    return _spec([entry], [entry], **extra)


def test_a_variable_buffer_keeps_its_chunks_ids_once_not_once_per_place():
    # requires: the load tries R = 2 only, so the test pays one instance.
    spec = parse_spec(_wide(3000, requires="R == 2"), "wide-v.yaml")
    tracemalloc.start()
    try:
        inst = instantiate(spec, 2, 4, 4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # 12,000 places are a few MB; a tuple of the ids before it on every place
    # held 2 ranks x 2 buffers x 3000²/2 ids x 8 B = 72 MB (quadratic).
    assert peak < 24 * 2**20, f"instantiating 3000 chunks a buffer peaked at {peak / 2**20:.0f} MiB"
    key, last = inst.inputs[1][-1]
    assert key == ("c", 1, 2999) and last.var == 5999
    assert last.base == tuple(range(3000, 5999)) and len(last.base) == 2999
    assert inst.inputs[1][0][1].base == () and not inst.inputs[1][0][1].base


def test_a_prefix_is_the_tuple_it_stands_for():
    ids = (4, 7, 1, 9)
    p = Prefix(ids, 3)
    assert p == (4, 7, 1) and (4, 7, 1) == p and p != (4, 7) and p != (4, 7, 1, 9)
    assert hash(p) == hash((4, 7, 1)) and p == Prefix((4, 7, 1), 3) and p != Prefix(ids, 2)
    assert list(p) == [4, 7, 1] and len(p) == 3 and 1 in p and 9 not in p and p[-1] == 1
    assert repr(p) == "(4, 7, 1)" and sum(p) == 12 and sorted(p) == [1, 4, 7]
    # A place with a shared prefix equals one read back with a plain tuple (JSON, pickles).
    place = Place(0, 16, 4, p, 9)
    assert place == Place(0, 16, 4, (4, 7, 1), 9) and hash(place) == hash(Place(0, 16, 4, (4, 7, 1), 9))
    assert pickle.loads(pickle.dumps(place)) == place
