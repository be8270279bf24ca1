#!/usr/bin/env bash
# Issue 30, device call 7 (from a snapshot of HEAD in .snap): under MPS, purlin
# beside the one-kernel IPC baseline at 2, 4 and 8 processes, and the
# Communicator's host cost and graph time.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/.snap
cd .snap
P="python3 -m purlin_bench.cli.main"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
for c in all-reduce all-gather reduce-scatter; do
  for n in 2 4 8; do
    timeout 45 $P bench $c --procs $n --backend cupy -b 8 -e 1M -f 8 --no-inplace --json $OUT/ipc-$c-$n.json > $OUT/ipc-$c-$n.log 2>&1
    grep -E "Speed-up|error" $OUT/ipc-$c-$n.log | sed "s/^/$c $n: /"
  done
done
for n in 2 8; do
  timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node $n lab/issue30/comm_host.py --bytes 16 > $OUT/comm-host-$n.log 2>&1; grep comm-host $OUT/comm-host-$n.log | sort
done
echo quit | nvidia-cuda-mps-control
