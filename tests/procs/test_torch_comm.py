"""purlin_bench.torch: imports without torch, maps tensors to counts, and (on
a GPU with torch) runs examples/tp_mlp.py under torchrun."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from purlin_bench.base.errors import PurlinError
from purlin_bench.spec.loader import resolve

ROOT = Path(__file__).resolve().parents[2]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_module_imports_without_torch():
    import purlin_bench.torch as pt

    assert pt.__all__ == ["Communicator"]
    if not HAS_TORCH:
        assert "torch" not in sys.modules


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed here")
def test_communicator_says_it_needs_torch():
    from purlin_bench.torch import Communicator

    with pytest.raises(PurlinError, match="needs torch") as info:
        Communicator()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("collective", "rank", "n_in", "count", "n_out"),
    [
        ("all-reduce", 1, 64, 64, 64),
        ("all-gather", 1, 64, 64, 256),
        ("reduce-scatter", 1, 64, 16, 16),
        ("all-to-all", 1, 64, 16, 64),
        ("broadcast", 0, 64, 64, 64),
        ("broadcast", 1, 64, 64, 64),  # a non-root's x gives the root's size
        ("reduce", 1, 64, 64, 0),
        ("gather", 0, 64, 64, 256),
        ("gather", 1, 64, 64, 0),
        ("scatter", 0, 64, 16, 16),
        ("scatter", 1, 64, 16, 16),
    ],
)
def test_count_for_matches_torch_shapes(collective, rank, n_in, count, n_out):
    from purlin_bench.torch._setup import count_for

    inst = count_for(resolve(collective), 4, rank, 0, 4, n_in, None)
    assert (inst.count, inst.out_counts[rank]) == (count, n_out)
    # The same with out= given.
    assert count_for(resolve(collective), 4, rank, 0, 4, n_in, n_out).count == count


def test_count_for_refuses_sizes_that_fit_no_count():
    from purlin_bench.torch._setup import count_for

    for collective, n_in, n_out in [
        ("reduce-scatter", 6, None),
        ("all-gather", 0, None),
        ("all-gather", 8, 9),
        ("all-to-all", 10, None),
    ]:
        with pytest.raises(PurlinError, match="fits no count") as info:
            count_for(resolve(collective), 4, 1, 0, 4, n_in, n_out)
        assert "\n" not in str(info.value)
    with pytest.raises(PurlinError, match="root 5"):
        count_for(resolve("broadcast"), 4, 1, 5, 4, 8, None)


def test_scatter_non_root_takes_its_count_from_out():
    from purlin_bench.torch._setup import count_for

    assert count_for(resolve("scatter"), 4, 2, 0, 2, 0, 24).count == 24


def _torchrun(*args: str) -> subprocess.CompletedProcess:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(ROOT / "examples" / "tp_mlp.py"),
        *args,
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done


@pytest.mark.gpu
def test_tp_mlp_under_torchrun():
    done = _torchrun("--replays", "100")
    assert "tp_mlp: 2 ranks, bfloat16, eager ok, 100 graph replays ok, max abs diff" in done.stdout, done.stdout[-4000:]


@pytest.mark.gpu
def test_tp_mlp_float32_under_torchrun():
    done = _torchrun("--dtype", "float32", "--replays", "20")
    assert "tp_mlp: 2 ranks, float32, eager ok, 20 graph replays ok" in done.stdout, done.stdout[-4000:]
