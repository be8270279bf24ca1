#!/usr/bin/env bash
# Issue 27, device call 5: the GPU tests this change touches, the 16 Mi-element
# rows of the check matrix at 8 processes, the compiled datapath at 8, and
# virtual ranks' small all-reduce beside torch (cooperative launches' cost).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
P="python3 -m purlin_bench.cli.main"
echo "== virtual ranks, all-reduce and all-gather to 64 KiB beside torch"
timeout 60 $P bench all-reduce,all-gather -b 8 -e 64K -f 8 --no-inplace > $OUT/bench-vr.log 2>&1; grep -E "^ +[0-9]|vs|torch" $OUT/bench-vr.log | head -30
echo "== GPU tests touched"
timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 190 -rfE tests/test_gpu_executor.py tests/test_gpu_compiled.py tests/test_gpu_comm_procs.py -k "jitter or every_collective or watchdog or graph" 2>&1 | tail -6 | tee $OUT/gpu-tests.log
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
echo "== check 8, 16 Mi elements"
timeout 150 $P check all --procs 8 --backend cupy --strategy all --dtype float32,bfloat16 --count 16777216 --inplace both > $OUT/check-8-16M.log 2>&1; grep -E "passed|failed" $OUT/check-8-16M.log | tail -3
echo "== compiled check 8"
timeout 70 $P check all --procs 8 --backend cupy --kernel compiled --strategy all --dtype bfloat16 --count 1001 --inplace both > $OUT/check-8-compiled.log 2>&1; grep -E "passed|failed" $OUT/check-8-compiled.log | tail -3
echo quit | nvidia-cuda-mps-control
