#!/usr/bin/env bash
# Session 16, device call 2 (see call1.sh) (.snap = git archive HEAD), under MPS. What
# session 15 could not run (no device lent), most important first; call 1 does
# 1 and 3, call2.sh 2 and 4:
# 1. The zero-copy Communicator (cb34c93, never run on a GPU): the worker's checks
#    at 2 and 8 processes, then its host cost and graph time beside the copying path.
# 2. The compiled -v default with 2e126d4's barrier rule: check every strategy at 3
#    and 8 virtual ranks, and the -v GPU tests (was session 15's call3.sh).
# 3. Issue 30's per-layout default: all-reduce --procs 8, direct vs two-shot, compiled.
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
echo "== 2. -v compiled, every strategy; -v GPU tests"
V=all-gather-v,reduce-scatter-v,all-to-all-v
( time timeout 120 $P check $V --backend cupy --ranks 3,8 --strategy all --count 1001,65536 --kernel compiled ) \
  > $T/check-v-compiled.log 2>&1; echo "rc=$?"; tail -3 $T/check-v-compiled.log
timeout 150 python3 -m pytest -q -p no:cacheprovider --timeout 100 -rfE tests/gpu/test_gpu_variable.py \
  tests/gpu/test_gpu_executor.py tests/unit/test_launch_params.py > $T/pytest-v.log 2>&1; echo "rc=$?"
tail -6 $T/pytest-v.log
echo "== 4. all-to-all-v, compiled default"
for d in skewed uniform; do
  timeout 60 $P bench all-to-all-v --backend cupy -b 16 -e 256M -f 8 --counts $d --no-inplace -n 10 -w 2 -G 3 \
    > $T/a2av-$d.log 2>&1
  grep -E "^ +[0-9]|strategy|peed-up|rror" $T/a2av-$d.log | sed "s/^/a2av $d: /"
done
echo "== 5. reduce-scatter-v at 4-32 MiB skewed (direct, one channel, was 0.33-0.42x torch): every strategy, channels"
timeout 120 $P bench reduce-scatter-v --backend cupy -b 4M -e 32M -f 8 --counts skewed --strategy all --no-inplace \
  -n 10 -w 2 -G 3 > $T/rsv-all.log 2>&1
grep -E "^ +[0-9]|strategy|rror" $T/rsv-all.log | head -40
for ch in 4 8; do
  timeout 40 $P bench reduce-scatter-v --backend cupy -b 4M -e 32M -f 8 --counts skewed --channels $ch --no-inplace \
    -n 10 -w 2 -G 3 > $T/rsv-ch$ch.log 2>&1
  grep -E "^ +[0-9]|strategy" $T/rsv-ch$ch.log | sed "s/^/rsv skewed channels $ch: /"
done
