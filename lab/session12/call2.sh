#!/usr/bin/env bash
# Session 12, device call 2 (snapshot of HEAD in .snap): variable-length
# collectives on the GPU (virtual ranks and --procs under MPS), the GPU tests
# call 1 did not reach, the conformance suite on the GPU.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/.snap
cd .snap
P="python3 -m purlin_bench.cli.main"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
echo "== pytest variable + conformance + late gpu files"
( time timeout 200 python3 -m pytest -q -p no:cacheprovider --timeout 150 -x -rfE tests/test_gpu_variable.py tests/test_conformance.py tests/test_nccl_baseline.py tests/test_torch_comm.py tests/test_tune_guard.py -m gpu ) > $OUT/pytest.log 2>&1
tail -8 $OUT/pytest.log
echo "== check -v virtual ranks"
( time timeout 150 $P check all-gather-v,reduce-scatter-v,all-to-all-v --backend cupy --ranks 1,2,3,5,8,9 --strategy all --dtype float32,bfloat16,int32 --count 1,1001,65536 ) > $OUT/check-v.log 2>&1
grep -E "passed|failed|rror" $OUT/check-v.log | tail -4
for n in 2 8; do
  echo "== check -v procs $n"
  ( time timeout 90 $P check all-gather-v,reduce-scatter-v,all-to-all-v --procs $n --backend cupy --strategy all --dtype float32,bfloat16 --count 1,1001,65536 ) > $OUT/check-v-p$n.log 2>&1
  grep -E "passed|failed|rror" $OUT/check-v-p$n.log | tail -4
done
echo quit | nvidia-cuda-mps-control
