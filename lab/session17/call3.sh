#!/usr/bin/env bash
# Session 17, device call 3 (.snap = git archive HEAD; .snap2 = 7815825, before notifies were
# released together and copies of one source merged), under MPS: the compiled datapath with both: checked at 8 processes (also with
# the jitter test mode) and on virtual ranks, every strategy; then all-reduce at 2, 4, 8
# processes beside ipc, every strategy and the default (D47); the Communicator's graph
# and host time beside the bench row of its size.
source lab/device-prelude.sh
mps_on
use_tree .snap
C=all-reduce,reduce-scatter,all-gather,all-to-all,broadcast,reduce
( time timeout 120 $P check $C --procs 8 --backend cupy --kernel compiled --strategy all --count 1,1001,65536 ) \
  > $T/check-p8.log 2>&1; echo "check p8 rc=$?"; summary $T/check-p8.log
( time PURLIN_JITTER=2000 timeout 90 $P check all-reduce,reduce-scatter,all-gather --procs 8 --backend cupy \
  --kernel compiled --strategy all --count 1001 ) > $T/check-p8-jitter.log 2>&1; echo "jitter rc=$?"
summary $T/check-p8-jitter.log
( time timeout 90 $P check all --ranks 3,8 --backend cupy --kernel compiled --strategy all --count 1,1001,65536 ) \
  > $T/check-vr.log 2>&1; echo "check vr rc=$?"; summary $T/check-vr.log
for n in 8 2; do
  timeout 100 $P bench all-reduce --procs $n --backend cupy -b 8 -e 1M -f 8 --no-inplace --strategy all \
    > $T/ar-p$n-all.log 2>&1; echo "rc=$?"
  rows "ar p$n" $T/ar-p$n-all.log
done
use_tree ../.snap2
for n in 8 2; do  # the same rows before 8d93ca6 and the merge, on this machine
  timeout 60 $P bench all-reduce --procs $n --backend cupy -b 8 -e 1M -f 8 --no-inplace --strategy all \
    > $T/before-p$n.log 2>&1; echo "rc=$?"
  rows "before p$n" $T/before-p$n.log
done
use_tree ../.snap
for n in 2 4 8; do
  timeout 60 $P bench all-reduce,reduce-scatter --procs $n --backend cupy -b 8 -e 1M -f 8 --no-inplace \
    > $T/auto-p$n.log 2>&1; echo "rc=$?"
  rows "auto p$n" $T/auto-p$n.log
done
for n in 2 8; do
  timeout 60 $TR $n lab/issue30/comm_host.py --bytes $((8 * n)) --zero-copy > $T/comm-host-p$n.log 2>&1
  grep comm-host $T/comm-host-p$n.log | sort | head -8
  timeout 60 $P bench all-reduce --procs $n --backend cupy -b $((8 * n)) -e $((8 * n)) --no-inplace \
    > $T/ar-row-p$n.log 2>&1; grep -E "^ +[0-9]|strategy" $T/ar-row-p$n.log | sed "s/^/row p$n: /"
done
