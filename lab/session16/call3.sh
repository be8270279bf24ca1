#!/usr/bin/env bash
# Session 16, device call 3 (.snap = git archive HEAD), under MPS: part 3 of the
# list in call1.sh (each call stays under the 600 s a command may run):
# 1. The zero-copy Communicator (cb34c93, never run on a GPU): the worker's checks
#    at 2 and 8 processes, then its host cost and graph time beside the copying path.
# 2. The compiled -v default with 2e126d4's barrier rule: check every strategy at 3
#    and 8 virtual ranks, and the -v GPU tests (was session 15's call3.sh).
# 3. push-parity (one flag exchange a call, never run on a GPU): checked under MPS, back to back
#    in graphs, then all-reduce --procs 8 direct / two-shot / push-parity beside ipc (a per-layout default).
# 4. all-to-all-v rows with the compiled default (call 1 of session 15 lost them).
# Logs go to one tarball (a limit on files returned); key lines to stdout.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T=/tmp/logs; mkdir -p $T
export PYTHONUNBUFFERED=1
trap 'tar -czf $OUT/logs.tgz -C $T .; echo quit | nvidia-cuda-mps-control 2>/dev/null' EXIT
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
cd .snap; export PYTHONPATH=/tmp/site:$PWD
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
P="python3 -m purlin_bench"
TR="python3 -m torch.distributed.run --standalone --nproc-per-node"
echo "== 3. push-parity (never run on a GPU): check, back to back in graphs, then all-reduce --procs 8 beside ipc"
( time timeout 120 $P check all-reduce,reduce-scatter --procs 8 --backend cupy --strategy push-parity,push \
    --count 1,1001,65536 --dtype float32,bfloat16 ) > $T/check-parity-p8.log 2>&1; echo "rc=$?"
tail -3 $T/check-parity-p8.log
timeout 60 $P check all-reduce,reduce-scatter --backend cupy --ranks 2,8 --strategy push-parity --count 1,1001,1048576 \
  > $T/check-parity-vr.log 2>&1; echo "rc=$?"; tail -2 $T/check-parity-vr.log
for n in 2 8; do
  timeout 150 $TR $n tests/gpu/gpu_back_to_back_worker.py > $T/b2b-p$n.log 2>&1
  echo "rc=$?"; grep b2b-check $T/b2b-p$n.log | sort | uniq -c | head -6
done
for s in direct two-shot push-parity; do
  timeout 60 $P bench all-reduce --procs 8 --backend cupy -b 8 -e 1M -f 8 --no-inplace --strategy $s \
    > $T/ar-p8-$s.log 2>&1
  grep -E "^ +[0-9]|strategy|rror" $T/ar-p8-$s.log | sed "s/^/ar p8 $s: /" | head -20
done
