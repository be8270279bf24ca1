#!/usr/bin/env bash
# Session 24, call 1: main + lab/session23/small-split-loads.patch (the tree) checked and
# timed over the whole range (16 B-64 MiB, -f 4, skewed and uniform), then the
# session-23 questions: the patch vs main (.snapmain) on reduce-scatter-v's small rows,
# even 16-byte counts vs the fixed collectives, the -v GPU tests and --procs 8 under MPS.
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
V3="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all"
for x in reduce-scatter-v all-gather-v all-to-all-v; do go m-$x-skewed 70 $x -b 16 -e 64M -f 4 --counts skewed; done
ck vcomp 120 $V3 --ranks 3,8 --kernel compiled -d float32,bfloat16
for x in reduce-scatter-v all-gather-v all-to-all-v; do go m-$x-uniform 70 $x -b 16 -e 64M -f 4 --counts uniform; done
( cd .snapmain && use_tree . && go main-rsv 40 reduce-scatter-v -b 64K -e 4M -f 4 --counts skewed )
go new-rsv 40 reduce-scatter-v -b 64K -e 4M -f 4 --counts skewed
even() { timeout 40 python3 lab/scripts/bench_even_counts.py "$@" $V > $T/even-$1.log 2>&1; echo "== even $1 rc=$?"
  rows even-$1 $T/even-$1.log; }
even reduce-scatter-v -b 512K -e 32M -f 4
go fixed-rs 40 reduce-scatter -b 512K -e 32M -f 4
even all-gather-v -b 512K -e 32M -f 4
go fixed-ag 40 all-gather -b 512K -e 32M -f 4
[ $SECONDS -lt 470 ] && { timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -x -p no:cacheprovider \
  > $T/pytest-v.log 2>&1; echo "== pytest rc=$?"; tail -3 $T/pytest-v.log; }
mps_on
STOP=540 ck procs8 60 $V3 --procs 8 --mps -d float32
