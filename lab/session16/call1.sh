#!/usr/bin/env bash
# Session 16, device calls 1-3 (.snap = git archive HEAD), under MPS. What
# session 15 and 16 could not run (no device lent), most important first; call 1
# does 1, call2.sh 2 and 4, call3.sh 3:
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
echo "== 1. zero-copy Communicator"
for n in 2 8; do
  ( time timeout 200 $TR $n tests/gpu/gpu_comm_worker.py --max-bytes 1048576 --replays 20 ) > $T/comm-worker-p$n.log 2>&1
  echo "rc=$?"; grep -E "comm-check|real" $T/comm-worker-p$n.log | sort | uniq -c | head -12
done
for n in 2 8; do
  timeout 120 $TR $n tests/gpu/gpu_comm_v_worker.py > $T/comm-v-worker-p$n.log 2>&1
  echo "rc=$?"; grep -E "comm-v-check" $T/comm-v-worker-p$n.log | sort | uniq -c | head -10
done
for n in 2 8; do
  for how in "" --zero-copy; do
    timeout 60 $TR $n lab/issue30/comm_host.py --bytes 16 $how > $T/comm-host-p$n$how.log 2>&1
    grep comm-host $T/comm-host-p$n$how.log | sort | head -8
  done
done
