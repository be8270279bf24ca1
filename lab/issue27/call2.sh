#!/usr/bin/env bash
# Issue 27, device call 1: facts (MPS SM counts, cooperative launches), the
# issue's failing commands with the fixes, under --mps and under a global MPS.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=driver_version,compute_mode --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
P="python3 -m purlin_bench.cli.main"
echo "== MPS control socket"
D=$(mktemp -d); mkdir -p $D/p $D/l
CUDA_MPS_PIPE_DIRECTORY=$D/p CUDA_MPS_LOG_DIRECTORY=$D/l nvidia-cuda-mps-control -d; sleep 1; ls -la $D/p; cat $D/l/* | tail -5
CUDA_MPS_PIPE_DIRECTORY=$D/p python3 -c "
import socket,os
for k in ('SOCK_STREAM','SOCK_SEQPACKET'):
    s=socket.socket(socket.AF_UNIX,getattr(socket,k))
    try: s.connect(os.environ['CUDA_MPS_PIPE_DIRECTORY']+'/control'); print(k,'connects')
    except OSError as e: print(k,e)
from purlin_bench.procs.mps import serving; print('serving', serving())"
echo quit | CUDA_MPS_PIPE_DIRECTORY=$D/p nvidia-cuda-mps-control; sleep 1; ls -la $D/p; pgrep -fa nvidia-cuda-mps
echo "== --mps private daemon: the issue's failing check"
timeout 110 $P check all-reduce --procs 8 --mps --backend cupy --strategy all --dtype float32 --count 65536,262144,1048576 2>&1 | tee $OUT/check-ar-8-mps.log | tail -25
echo "leftover mps: $(pgrep -fa nvidia-cuda-mps | head -3)"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
echo "== facts (MPS)"; timeout 50 python3 lab/issue27/facts.py 2>&1 | tee $OUT/facts-mps.log
echo "== bench all-reduce procs 8"
timeout 80 $P bench all-reduce --procs 8 --backend cupy -b 8 -e 1M -f 8 --no-inplace 2>&1 | tee $OUT/bench-ar-8.log | tail -20
echo "== bench all-reduce procs 8 at 12%"
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12 timeout 80 $P bench all-reduce --procs 8 --backend cupy -b 8 -e 1M -f 8 --no-inplace 2>&1 | tee $OUT/bench-ar-8-12pct.log | tail -20
echo "== check all procs 8"
( time timeout 160 $P check all --procs 8 --backend cupy --strategy all --dtype float32,bfloat16 --count 1,1001,65536,1048576,16777216 --inplace both ) 2>&1 | tee $OUT/check-all-8.log | tail -15
echo "== comm worker 8"
timeout 90 python3 -m torch.distributed.run --standalone --nproc-per-node 8 tests/gpu_comm_worker.py --max-bytes 1048576 --replays 20 2>&1 | grep -v Warning | tail -12 | tee $OUT/comm-8.log
echo quit | nvidia-cuda-mps-control
