#!/usr/bin/env bash
# Session 17, device call 5 (.snap = HEAD): reduce-scatter at 4 and 8 processes, every strategy
# beside ipc (its default, direct, was 1.3-2.9x ipc's time in call 4; push-parity unmeasured there).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T=/tmp/logs; mkdir -p $T
trap 'tar -czf $OUT/logs.tgz -C $T .; echo quit | nvidia-cuda-mps-control 2>/dev/null' EXIT
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
cd .snap; export PYTHONPATH=/tmp/site:$PWD
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
rows() { grep -E "^ +[0-9]|strategy" "$2" | paste - - | awk '{print "'"$1"'", $1, $6, $0}' \
  | sed -E 's/ +[0-9]+ +[0-9]+ +float.*strategy/ /; s/; floor.*//' | cut -c1-110; }
for n in 8 4; do
  timeout 80 python3 -m purlin_bench bench reduce-scatter --procs $n --backend cupy -b 64 -e 1M -f 8 --no-inplace \
    --strategy all > $T/rs-p$n-all.log 2>&1; echo "rc=$?"; rows "rs p$n" $T/rs-p$n-all.log | grep -v ring
done
