#!/usr/bin/env bash
# Session 13, device call 1 (snapshot of HEAD 8d0c255 in .snap): the whole GPU test
# suite under MPS, owed since session 12 changed atoms/snac.cu (variable builds) and
# the review mends after it (never run on a GPU), and the Communicator through StreamRunner.enqueue.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/.snap
cd .snap
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
echo "== pytest -m gpu"
( time timeout 570 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout 200 -rfE --durations 15 tests ) > $OUT/pytest-gpu.log 2>&1
tail -45 $OUT/pytest-gpu.log
echo quit | nvidia-cuda-mps-control
