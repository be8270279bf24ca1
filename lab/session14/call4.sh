#!/usr/bin/env bash
# Session 14, device call 4 (call 3 cut to what the device time left allows;
# .snap2 = HEAD 03499f0): all-gather-v and all-to-all-v, skewed counts, 8
# virtual ranks, 8 B-1 MiB by 8x, the compiled datapath then the interpreter,
# each beside torch in its own process on the same machine.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
cd .snap2; export PYTHONPATH=/tmp/site:$PWD
for c in all-to-all-v all-gather-v; do
  for k in compiled interpreted; do
    timeout 40 python3 -m purlin_bench bench $c --backend cupy -b 8 -e 1M -f 8 --counts skewed --kernel $k \
      -n 10 -w 2 -G 3 > $OUT/$c-$k.log 2>&1
    grep -E "^ +[0-9]|Speed-up|rror" $OUT/$c-$k.log | sed "s/^/$c $k: /"
  done
done
