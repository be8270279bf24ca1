#!/usr/bin/env bash
# Session 12, device call 3 (snapshot of HEAD in .snap): variable-length
# collectives on the GPU, virtual ranks and --procs under MPS; their bench
# beside the torch baseline (issue 31's target), uniform and skewed.
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
  echo "== check -v procs $n"
  ( time timeout 60 $P check all-gather-v,reduce-scatter-v,all-to-all-v --procs $n --backend cupy --strategy all --dtype float32,bfloat16 --count 1,1001,65536 ) > $OUT/check-v-p$n.log 2>&1
  grep -E "passed|failed|rror" $OUT/check-v-p$n.log | tail -3
done
echo "== pytest variable + conformance"
( time timeout 150 python3 -m pytest -q -p no:cacheprovider --timeout 120 -rfE tests/test_gpu_variable.py tests/test_conformance.py -m gpu ) > $OUT/pytest.log 2>&1
tail -6 $OUT/pytest.log
for c in all-gather-v reduce-scatter-v all-to-all-v; do
  for d in uniform skewed; do
    timeout 60 $P bench $c --backend cupy -b 8 -e 256M -f 8 --counts $d --baseline torch --format nccl-tests --json $OUT/bench-$c-$d.json > $OUT/bench-$c-$d.log 2>&1
    grep -E "Speed-up|rror" $OUT/bench-$c-$d.log | sed "s/^/$c $d: /"
  done
done
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
echo quit | nvidia-cuda-mps-control
