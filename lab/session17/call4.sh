#!/usr/bin/env bash
# Session 17, device call 4 (.snap = git archive HEAD), under MPS: what call 3 lost to
# the driver's AttributeError (every bench at HEAD), plus the -v compiled check.
source lab/device-prelude.sh
mps_on
use_tree .snap
for n in 8 2; do
  timeout 70 $P bench all-reduce --procs $n --backend cupy -b 8 -e 1M -f 8 --no-inplace --strategy all \
    > $T/ar-p$n-all.log 2>&1; echo "rc=$?"; rows "all p$n" $T/ar-p$n-all.log
done
for n in 2 4 8; do
  timeout 60 $P bench all-reduce,reduce-scatter --procs $n --backend cupy -b 8 -e 1M -f 8 --no-inplace \
    > $T/auto-p$n.log 2>&1; echo "rc=$?"; rows "auto p$n" $T/auto-p$n.log
done
for n in 2 8; do
  timeout 60 $P bench all-reduce --procs $n --backend cupy -b $((8 * n)) -e $((8 * n)) --no-inplace \
    > $T/ar-row-p$n.log 2>&1; rows "row p$n" $T/ar-row-p$n.log
  timeout 60 $TR $n lab/issue30/comm_host.py --bytes $((8 * n)) --zero-copy > $T/comm-host-p$n.log 2>&1
  grep comm-host $T/comm-host-p$n.log | sort | head -8
done
( time timeout 80 $P check all-reduce,reduce-scatter,all-gather,all-to-all --procs 8 --backend cupy --kernel compiled \
  --strategy all --count 1001 ) > $T/check-p8.log 2>&1; echo "check p8 rc=$?"; summary $T/check-p8.log
( time timeout 90 $P check all-gather-v,reduce-scatter-v,all-to-all-v --backend cupy --ranks 3,8 --strategy all \
  --count 1001,65536 --kernel compiled ) > $T/check-v.log 2>&1; echo "check -v rc=$?"; summary $T/check-v.log
