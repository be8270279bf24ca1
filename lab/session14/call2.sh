#!/usr/bin/env bash
# Session 14, device call 2, under MPS. .snap is HEAD (9e18a49); .snap2 is the
# working tree (the compiled datapath for sizes per call, now the -v default)
# plus lab/session13/host-path.patch.
# 1. Issue 30: the Communicator's host cost (lab/issue30/comm_host.py) at 2 and
#    8 processes, and bench all-reduce --procs 8 vs the ipc baseline, both trees.
# 2. Issue 31: the compiled -v kernel checked: virtual ranks, --procs 2 and 8,
#    and the GPU tests through the changed launch paths (Communicator included).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
ROOT=$PWD
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
use() { cd $ROOT/$1; export PYTHONPATH=/tmp/site:$ROOT/$1; }
P="python3 -m purlin_bench"
use .snap2
echo "== check -v, virtual ranks, compiled"
( time timeout 150 $P check all-gather-v,reduce-scatter-v,all-to-all-v --backend cupy --ranks 3,8 --strategy all \
    --count 1001,65536 --kernel compiled ) > $OUT/check-v-compiled.log 2>&1
tail -4 $OUT/check-v-compiled.log
( time timeout 60 $P check all-gather-v,reduce-scatter-v,all-to-all-v --backend cupy --ranks 1,5,9 --dtype bfloat16 \
    --count 1,4097 ) > $OUT/check-v-default-bf16.log 2>&1
tail -4 $OUT/check-v-default-bf16.log
for n in 2 8; do
  ( time timeout 60 $P check all-gather-v,reduce-scatter-v,all-to-all-v --procs $n --backend cupy --strategy all \
      --count 1,1001 --kernel compiled ) > $OUT/check-v-p$n.log 2>&1
  tail -4 $OUT/check-v-p$n.log
done
echo "== patched: GPU tests through the launch paths"
( time timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout 150 -rfE tests/gpu/test_gpu_comm_procs.py \
    tests/gpu/test_gpu_executor.py tests/gpu/test_gpu_variable.py tests/unit/test_launch_params.py ) \
    > $OUT/pytest-patched.log 2>&1
tail -8 $OUT/pytest-patched.log
for tree in .snap .snap2; do
  use $tree
  for n in 2 8; do
    timeout 45 python3 -m torch.distributed.run --standalone --nproc-per-node $n $ROOT/lab/issue30/comm_host.py \
      --bytes 16 > $OUT/comm-host-$tree-$n.log 2>&1
    grep comm-host $OUT/comm-host-$tree-$n.log | sort | sed "s/^/$tree /" | head -3
  done
  timeout 45 $P bench all-reduce --procs 8 --backend cupy -b 8 -e 256K -f 8 --no-inplace \
    > $OUT/bench-procs8-$tree.log 2>&1
  grep -E "Speed-up|rror|^ +[0-9]" $OUT/bench-procs8-$tree.log | sed "s/^/$tree /"
done
echo quit | nvidia-cuda-mps-control
