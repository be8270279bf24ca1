#!/usr/bin/env bash
# Session 14, device call 3 (.snap2: a snapshot of HEAD): the -v collectives
# against torch at 8 virtual ranks, 8 B-16 MiB by 8x, skewed counts, with the
# compiled datapath (the default there now) and with the interpreter, one
# after the other on the same machine; each row checked before it is timed.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
cd .snap2; export PYTHONPATH=/tmp/site:$PWD
for c in all-gather-v all-to-all-v reduce-scatter-v; do
  for k in compiled interpreted; do
    timeout 60 python3 -m purlin_bench bench $c --backend cupy -b 8 -e 16M -f 8 --counts skewed --kernel $k \
      > $OUT/$c-$k.log 2>&1
    grep -E "^ +[0-9]|Speed-up|rror" $OUT/$c-$k.log | sed "s/^/$c $k: /"
  done
done
