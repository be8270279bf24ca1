#!/usr/bin/env bash
# Session 14, device call 1 (was session 13 call 2) (snapshot of the redesign's last commit in .snap): the
# GPU test suite from its new folder (tests/gpu and every gpu-marked test) after
# the GPU backend's split and its launch objects per kernel kind; the 92 s jitter
# test left out to fit the call. Then one virtual-rank bench beside call 1's era.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/.snap
cd .snap
git log -1 --oneline 2>/dev/null || true
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
echo "== pytest -m gpu"
( time timeout 470 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout 200 -rfE --durations 10 \
    --deselect tests/gpu/test_gpu_compiled.py::test_jitter_keeps_every_result tests ) > $OUT/pytest-gpu.log 2>&1
tail -30 $OUT/pytest-gpu.log
echo quit | nvidia-cuda-mps-control
echo "== bench all-reduce, 8 virtual ranks"
timeout 60 python3 -m purlin_bench bench all-reduce --backend cupy -b 8 -e 1M -f 8 > $OUT/bench-ar.log 2>&1
grep -v "^#  " $OUT/bench-ar.log | tail -14
