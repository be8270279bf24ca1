#!/usr/bin/env bash
# Session 12, device call 6: all-to-all-v with D45's default vs torch.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/.snap
cd .snap
for d in uniform skewed; do
  timeout 60 python3 -m purlin_bench.cli.main bench all-to-all-v --backend cupy -b 8 -e 256M -f 8 --counts $d --baseline torch --format nccl-tests > $OUT/bench-a2av-d45-$d.log 2>&1
  grep -E "Speed-up|rror" $OUT/bench-a2av-d45-$d.log | sed "s/^/$d: /"
done
