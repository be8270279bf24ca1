#!/usr/bin/env bash
# Session 23, call 2: SPLIT_LOADS for ops with one destination only (reduce-scatter-v,
# all-to-all-v; all-gather-v's eight-destination ops back to element copies), skewed
# rows 512 KiB-32 MiB, then a short exactness check of the compiled -v path.
source lab/device-prelude.sh
use_tree $PWD
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for x in reduce-scatter-v all-to-all-v all-gather-v; do go r-$x 20 $x -b 512K -e 32M -f 4 --counts skewed; done
timeout 25 $P check all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all --ranks 8 --kernel compiled \
  --backend cupy --failed-only > $T/check.log 2>&1; echo "== check rc=$?"; summary $T/check.log; grep -E "note" $T/check.log | tail -1
