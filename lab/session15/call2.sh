#!/usr/bin/env bash
# Session 15, device call 2 (.snap = HEAD 2e126d4, barriers elided): the whole GPU test suite
# under MPS (the 92 s jitter test left out to fit the call) after the compiled
# -v datapath, the host-path patch and 08db1a2's runner refactor.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
cd .snap; export PYTHONPATH=/tmp/site:$PWD
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
( time timeout 540 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout 200 -rfE --durations 10 \
    --deselect tests/gpu/test_gpu_compiled.py::test_jitter_keeps_every_result tests ) > $OUT/pytest-gpu.log 2>&1
tail -40 $OUT/pytest-gpu.log
echo quit | nvidia-cuda-mps-control
