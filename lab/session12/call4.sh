#!/usr/bin/env bash
# Session 12, device call 4 (snapshot of HEAD in .snap): the Communicator's
# *_v calls under MPS at 2 and 8 processes (eager, graphs with device counts,
# a bad count), and all-to-all-v's bench beside torch.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/.snap
cd .snap
P="python3 -m purlin_bench.cli.main"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for n in 2 8; do
  echo "== comm v $n"
  ( time timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node $n tests/gpu_comm_v_worker.py ) > $OUT/comm-v-$n.log 2>&1
  grep -E "comm-v-check|Error|real" $OUT/comm-v-$n.log | sort | head -12
done
for d in uniform skewed; do
  timeout 60 $P bench all-to-all-v --backend cupy -b 8 -e 256M -f 8 --counts $d --baseline torch --format nccl-tests --json $OUT/bench-a2av-$d.json > $OUT/bench-a2av-$d.log 2>&1
  grep -E "Speed-up|rror" $OUT/bench-a2av-$d.log | sed "s/^/all-to-all-v $d: /"
done
echo quit | nvidia-cuda-mps-control
