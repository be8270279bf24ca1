#!/usr/bin/env bash
# Session 12, device call 1 (from a snapshot of HEAD in .snap): everything since
# 31051c2 was never run on a GPU. Under MPS: the whole GPU test suite, the
# Communicator at 8 processes with the compiled default, one --procs 8 bench.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/.snap
cd .snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
echo "== pytest -m gpu"
( time timeout 330 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout 150 -rfE tests ) > $OUT/pytest-gpu.log 2>&1
tail -25 $OUT/pytest-gpu.log
echo "== communicator torchrun 8"
( time timeout 170 python3 -m torch.distributed.run --standalone --nproc-per-node 8 tests/gpu_comm_worker.py --max-bytes 1048576 --replays 20 ) > $OUT/comm8.log 2>&1
tail -8 $OUT/comm8.log
echo "== bench all-reduce procs 8"
timeout 60 python3 -m purlin_bench.cli.main bench all-reduce --procs 8 --backend cupy -b 8 -e 1M -f 8 --no-inplace > $OUT/bench8.log 2>&1
grep -v "^#  " $OUT/bench8.log | tail -12
echo quit | nvidia-cuda-mps-control
