"""The Communicator under torchrun, ranks as processes on this machine's
GPU(s), under a private CUDA MPS daemon where one can start (concurrent:
the ranks race as on several GPUs), else time-sliced: every collective,
eager and from graphs, bit-exact (tests/gpu/gpu_comm_worker.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from purlin_bench.procs.mps import PrivateMps
from purlin_bench.base.errors import PurlinError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_every_collective_is_exact_through_the_communicator():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    procs = os.environ.get("PURLIN_TEST_PROCS", "2")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        procs,
        str(Path(__file__).resolve().parent / "gpu_comm_worker.py"),
        "--max-bytes",
        str(1 << 20),
        "--replays",
        "20",
    ]
    try:
        with PrivateMps():
            done = subprocess.run(
                cmd,
                cwd=ROOT,
                env={**env, **{k: os.environ[k] for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}},
                capture_output=True,
                text=True,
                timeout=500,
            )
    except PurlinError:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.count("checks exact") == int(procs), done.stdout[-4000:]


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_variable_sizes_are_exact_through_the_communicator_with_device_counts():
    """all_gather_v, reduce_scatter_v, all_to_all_v: eager and from a graph
    replayed with counts rewritten on the GPU (tests/gpu/gpu_comm_v_worker.py)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    procs = os.environ.get("PURLIN_TEST_PROCS", "2")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        procs,
        str(Path(__file__).resolve().parent / "gpu_comm_v_worker.py"),
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.count("checks exact") == int(procs), done.stdout[-4000:]


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_calls_back_to_back_in_one_graph_are_exact_with_every_protocol():
    """64 all-reduce and reduce-scatter calls in one graph, each on an input the
    stream just changed, no sync between them: the default and push-parity
    (no ready/done flags: ranks run into the next call while peers finish
    this one), concurrent under a private MPS daemon where one can start."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    procs = os.environ.get("PURLIN_TEST_PROCS", "2")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    worker = str(Path(__file__).resolve().parent / "gpu_back_to_back_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", procs, worker]
    try:
        with PrivateMps():
            mps = {k: os.environ[k] for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}
            done = subprocess.run(cmd, cwd=ROOT, env={**env, **mps}, capture_output=True, text=True, timeout=280)
    except PurlinError:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.count("checks exact") == int(procs), done.stdout[-4000:]
