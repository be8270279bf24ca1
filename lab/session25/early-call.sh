#!/usr/bin/env bash
# Branch flat-early: all-gather-v's flat loads issued before the counts come back
# (variable.early_code) against main (.snapprev = git archive of main, carried), skewed and
# uniform 16 B-1 MiB, then its exactness (compiled -v at 3 and 8 ranks, the -v GPU tests).
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for d in skewed uniform; do
  for t in early main; do ( [ $t = main ] && cd .snapprev; use_tree $PWD; go $t-agv-$d 40 all-gather-v -b 16 -e 1M -f 4 --counts $d ); done
done
ck vearly 90 all-gather-v --strategy all --counts all --ranks 3,8 --kernel compiled -d float32,bfloat16
timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -p no:cacheprovider > $T/pytest-v.log 2>&1
echo "== pytest rc=$?"; tail -2 $T/pytest-v.log
