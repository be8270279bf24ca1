#!/usr/bin/env bash
# Issue 27, device call 3: under MPS, the check matrix at 2, 4 and 8
# processes (interpreter), a 12% MPS limit, and a rank killed mid-run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
P="python3 -m purlin_bench.cli.main"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
echo "== bench all-reduce procs 8 at 12%"
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12 timeout 70 $P bench all-reduce --procs 8 --backend cupy -b 8 -e 1M -f 8 --no-inplace 2>&1 | tee $OUT/bench-ar-8-12pct.log | grep -v "^#  " | tail -9
echo "== kill a rank"
timeout 70 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 65 -rfE tests/test_procs.py -k "killing and cupy" 2>&1 | tail -3 | tee $OUT/kill.log
echo "leftover: $(pgrep -fa 'purlin_bench' | head -3)"
echo "== check matrix 2,4,8"
( time timeout 420 $P check all --procs 2,4,8 --backend cupy --strategy all --dtype float32,bfloat16 --count 1,1001,65536,1048576 --inplace both ) > $OUT/check-248.log 2>&1
grep -E "passed|failed|error|Error" $OUT/check-248.log | tail -12; tail -4 $OUT/check-248.log
echo quit | nvidia-cuda-mps-control
