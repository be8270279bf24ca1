#!/usr/bin/env bash
# Session 15, device call 1 (.snap = HEAD 2e126d4, barriers elided): the -v bench, compiled
# datapath vs interpreter, each beside torch in its own process, 8 virtual
# ranks, 16 B-256 MiB by 8x, uniform and skewed counts (issue 31's target rows).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
cd .snap; export PYTHONPATH=/tmp/site:$PWD
for c in all-to-all-v all-gather-v reduce-scatter-v; do
  for d in skewed uniform; do
    for k in compiled interpreted; do
      timeout 60 python3 -m purlin_bench bench $c --backend cupy -b 16 -e 256M -f 8 --counts $d --kernel $k \
        --no-inplace -n 10 -w 2 -G 3 --json $OUT/$c-$d-$k.json > $OUT/$c-$d-$k.log 2>&1
      echo "rc=$?"
      grep -E "^ +[0-9]|strategy|peed-up|rror" $OUT/$c-$d-$k.log | sed "s/^/$c $d $k: /"
    done
  done
done
