#!/usr/bin/env bash
# For the next session (.snap = git archive HEAD), under MPS, one call: reduce-scatter and
# all-reduce at 4 and 8 processes, every strategy beside ipc, after push's consumes moved
# behind its stages (reduce-scatter push-parity: 8 flag hops -> 1; D47 keeps direct for it
# on numbers taken before); then where 8 processes lose time: all-reduce push-parity with
# 1 and 8 blocks a rank (every block bumps every flag and waiters wait for the slowest).
source lab/device-prelude.sh
mps_on
use_tree .snap
timeout 90 $P check reduce-scatter,all-reduce,reduce-scatter-v --procs 8 --backend cupy --strategy push,push-parity \
  --count 1,1001,65536 > $T/check-push.log 2>&1; echo "check rc=$?"; tail -1 $T/check-push.log
for n in 8 4; do
  for c in reduce-scatter all-reduce; do
    timeout 80 $P bench $c --procs $n --backend cupy -b 64 -e 1M -f 8 --no-inplace --strategy all \
      > $T/$c-p$n.log 2>&1; echo "rc=$?"; rows "$c p$n" $T/$c-p$n.log | grep -v ring
  done
done
for b in 1 8; do
  timeout 60 $P bench all-reduce --procs 8 --backend cupy -b 64 -e 256K -f 8 --no-inplace --strategy push-parity \
    --blocks $b > $T/ar-p8-blocks$b.log 2>&1; echo "rc=$?"; rows "blocks $b" $T/ar-p8-blocks$b.log
done
