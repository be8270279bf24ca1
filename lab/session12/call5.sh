#!/usr/bin/env bash
# Session 12, device call 5: which channel count and strategy the -v
# collectives' default should take (8 virtual ranks, vs torch, same run).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/.snap
cd .snap
P="python3 -m purlin_bench.cli.main"
for c in all-to-all-v all-gather-v; do
  for s in "push --channels 1" "push --channels 2" "direct --channels 1" "ring --channels 4"; do
    for d in uniform skewed; do
      timeout 40 $P bench $c --backend cupy -b 8 -e 256M -f 64 --counts $d --baseline torch --strategy $s --format nccl-tests > $OUT/x.log 2>&1
      echo "$c [$s] $d: $(grep -E "Speed-up|rror" $OUT/x.log) | $(grep -E '^ +[0-9]' $OUT/x.log | awk '{printf "%s:%s ", $1, $6}')"
    done
  done
done
