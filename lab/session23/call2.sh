#!/usr/bin/env bash
# Session 23, call 2 (not run: no device time left; the next session's first call):
# the merged build (SPLIT_LOADS for ops with one destination) checked and timed, skewed
# rows 512 KiB-32 MiB (from branch small-split-loads, with .snapmain = git archive main,
# also the branch: the one-round small reduction storing elements); then even, aligned counts (lab/scripts/bench_even_counts.py)
# beside the fixed collectives of the same sizes, to split the variable rows' cost into
# alignment, uneven sizes and the variable machinery itself (NOTES.md).
source lab/device-prelude.sh
use_tree $PWD
timeout 100 $P check all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all --ranks 3,8 --kernel compiled \
  -d float32,bfloat16 --backend cupy --failed-only > $T/check.log 2>&1; echo "== check rc=$?"; summary $T/check.log
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for x in reduce-scatter-v all-to-all-v all-gather-v; do go r-$x 40 $x -b 512K -e 32M -f 4 --counts skewed; done
[ -d .snapmain ] && ( cd .snapmain && use_tree . && go main-rsv 40 reduce-scatter-v -b 512K -e 32M -f 4 --counts skewed \
  && go main-ar-small 40 all-reduce -b 8 -e 64K -f 8 ) && go ar-small 40 all-reduce -b 8 -e 64K -f 8
even() { timeout 40 python3 lab/scripts/bench_even_counts.py "$@" $V > $T/even-$1.log 2>&1; echo "== even $1 rc=$?"
  rows even-$1 $T/even-$1.log; }
even reduce-scatter-v -b 2M -e 32M -f 4
even all-gather-v -b 2M -e 32M -f 4
go fixed-rs 40 reduce-scatter -b 2M -e 32M -f 4
go fixed-ag 40 all-gather -b 2M -e 32M -f 4
