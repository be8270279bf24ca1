#!/usr/bin/env bash
# Session 17, device call 1 (.snap = git archive HEAD), under MPS: push-parity where
# session 16's call3 found it refused (check and bench asked no kernel; the interpreter
# cannot run parity scratch), and every all-reduce strategy at --procs 2 and 8 on its
# compiled datapath (named strategies now get the backend's datapath defaults), beside ipc.
source lab/device-prelude.sh
mps_on
use_tree .snap
( time timeout 100 $P check all-reduce,reduce-scatter --procs 8 --backend cupy --strategy push-parity \
    --count 1,1001,65536 --dtype float32,bfloat16 ) > $T/check-parity-p8.log 2>&1; echo "rc=$?"
grep -cE "pass" $T/check-parity-p8.log; grep -E "fail|error|n/a" $T/check-parity-p8.log | head -5; tail -4 $T/check-parity-p8.log
timeout 60 $P check all-reduce,reduce-scatter --backend cupy --ranks 2,8 --strategy push-parity --count 1,1001,1048576 \
  > $T/check-parity-vr.log 2>&1; echo "rc=$?"; grep -cE "pass" $T/check-parity-vr.log; grep -E "fail|error|n/a" $T/check-parity-vr.log | head -3
for n in 8 2; do
  for s in auto all; do
    timeout 170 $P bench all-reduce --procs $n --backend cupy -b 8 -e 1M -f 8 --no-inplace --strategy $s \
      > $T/ar-p$n-$s.log 2>&1; echo "rc=$?"
    grep -E "^ +[0-9]|strategy|rror" $T/ar-p$n-$s.log | sed "s/^/ar p$n $s: /" | head -70
  done
done
# The Communicator's graph time beside the bench row of the same size, on the same machine minutes apart.
for n in 2 8; do
  timeout 60 $TR $n lab/issue30/comm_host.py --bytes $((8 * n)) --zero-copy > $T/comm-host-p$n.log 2>&1
  grep comm-host $T/comm-host-p$n.log | sort | head -8
  timeout 60 $P bench all-reduce --procs $n --backend cupy -b $((8 * n)) -e $((8 * n)) --no-inplace \
    > $T/ar-row-p$n.log 2>&1; grep -E "^ +[0-9]|strategy" $T/ar-row-p$n.log | sed "s/^/row p$n: /"
done
