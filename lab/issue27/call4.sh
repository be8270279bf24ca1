#!/usr/bin/env bash
# Issue 27, device call 4: under MPS at 8 processes: the check matrix with
# the jitter test mode, the compiled datapath, the Communicator to 64 MiB
# with 100 graph replays, and bench of every collective to 256 MiB.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
P="python3 -m purlin_bench.cli.main"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
echo "== jitter check 8"
PURLIN_JITTER=2000 timeout 110 $P check all --procs 8 --backend cupy --strategy all --dtype float32,bfloat16 --count 1,1001,65536 --inplace both > $OUT/check-8-jitter.log 2>&1; grep -E "passed|failed" $OUT/check-8-jitter.log | tail -3
echo "== compiled check 4"
timeout 120 $P check all --procs 4 --backend cupy --kernel compiled --strategy all --dtype float32 --count 1001,65536 --inplace both > $OUT/check-4-compiled.log 2>&1; grep -E "passed|failed" $OUT/check-4-compiled.log | tail -3
echo "== comm worker 8, 16 B to 64 MiB, 100 replays"
timeout 170 python3 -m torch.distributed.run --standalone --nproc-per-node 8 tests/gpu_comm_worker.py --max-bytes 67108864 --replays 100 > $OUT/comm-8-64M.log 2>&1; grep "comm-check" $OUT/comm-8-64M.log | sort | tail -8
echo "== bench all 8 to 256 MiB"
timeout 175 $P bench all --procs 8 --backend cupy -b 16 -e 256M -f 16 --json $OUT/bench-all-8.json > $OUT/bench-all-8.log 2>&1; grep -E "^ +[0-9]|error|Out of bounds" $OUT/bench-all-8.log | tail -70
echo quit | nvidia-cuda-mps-control
