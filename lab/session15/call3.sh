#!/usr/bin/env bash
# Session 15, device call 3 (.snap = HEAD: barriers elided, the compiled -v
# default): the -v GPU tests and a check of every strategy under MPS, then
# all-to-all-v bench rows first (call 1 lost them: too many files came back).
# Logs go to one file each; the key lines to stdout.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T=/tmp/logs; mkdir -p $T
export PYTHONUNBUFFERED=1
trap 'tar -czf $OUT/logs.tgz -C $T .' EXIT
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
cd .snap; export PYTHONPATH=/tmp/site:$PWD
for d in skewed uniform; do
  timeout 60 python3 -m purlin_bench bench all-to-all-v --backend cupy -b 16 -e 256M -f 8 --counts $d \
    --no-inplace -n 10 -w 2 -G 3 > $T/a2av-$d-default.log 2>&1
  grep -E "^ +[0-9]|strategy|peed-up|rror" $T/a2av-$d-default.log | sed "s/^/a2av $d default: /"
done
timeout 60 python3 -m purlin_bench bench all-to-all-v --backend cupy -b 16 -e 256M -f 8 --counts skewed \
  --kernel interpreted --no-inplace -n 10 -w 2 -G 3 > $T/a2av-skewed-interpreted.log 2>&1
grep -E "^ +[0-9]|strategy|peed-up|rror" $T/a2av-skewed-interpreted.log | sed "s/^/a2av skewed interp: /"
for ch in 4 8; do
  timeout 40 python3 -m purlin_bench bench reduce-scatter-v --backend cupy -b 4M -e 32M -f 8 --counts skewed \
    --channels $ch --no-inplace -n 10 -w 2 -G 3 > $T/rsv-ch$ch.log 2>&1
  grep -E "^ +[0-9]|strategy" $T/rsv-ch$ch.log | sed "s/^/rsv skewed channels $ch: /"
done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
V=all-gather-v,reduce-scatter-v,all-to-all-v
echo "== check -v, virtual ranks 3,8, every strategy, compiled"
timeout 120 python3 -m purlin_bench check $V --backend cupy --ranks 3,8 --strategy all --count 1001,65536 \
  --kernel compiled > $T/check-compiled.log 2>&1; echo "rc=$?"; tail -3 $T/check-compiled.log
echo "== pytest -v GPU tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider --timeout 100 -rfE tests/gpu/test_gpu_variable.py \
  tests/gpu/test_gpu_comm_procs.py tests/gpu/test_gpu_executor.py tests/unit/test_launch_params.py \
  > $T/pytest.log 2>&1; echo "rc=$?"; tail -8 $T/pytest.log
echo quit | nvidia-cuda-mps-control
