#!/usr/bin/env bash
# Session 18, device call 1 (.snap = git archive HEAD), under MPS. Why does a flag hop cost us
# 2-3x ipc's at 8 processes (session 17: direct reduce-scatter, ipc's very shape, 38 us to 15)?
# The generated kernel matches ipc's (one barrier, 7 red.release, 7 polls); what differs is
# the launch: ours is cooperative (D40), ipc's is not. .snap3 = HEAD with our launches plain,
# .snap4 = HEAD with ipc's launch cooperative (lab patches, never on main). Then session 17's
# call8: push/push-parity after the consume reorder, every strategy at 8 and 4 processes.
source lab/device-prelude.sh
mps_on
for n in 3 4; do rm -rf .snap$n; cp -r .snap .snap$n; done
sed -i 's/self.cooperative = bool(len(lowered.ops)).*/self.cooperative = False/' .snap3/purlin_bench/backends/cupy/runtime/launch.py
sed -i 's/args, stream=stream)/args, stream=stream, enable_cooperative_groups=True)/' .snap4/purlin_bench/backends/cupy/baselines/ipc.py
grep -c "cooperative = False" .snap3/purlin_bench/backends/cupy/runtime/launch.py
grep -c "enable_cooperative_groups=True" .snap4/purlin_bench/backends/cupy/baselines/ipc.py
B="bench reduce-scatter,all-reduce --procs 8 --backend cupy -b 64 -e 64K -f 8 --no-inplace"
for tree in .snap .snap3 .snap4 .snap3; do
  ( use_tree $tree && timeout 60 $P $B > $T/coop$tree.log 2>&1 ); echo "$tree rc=$? t=$SECONDS"
  rows "$tree" $T/coop$tree.log
done
use_tree .snap
timeout 80 $P check reduce-scatter,all-reduce,reduce-scatter-v --procs 8 --backend cupy --strategy push,push-parity \
  --count 1,1001,65536 > $T/check-push.log 2>&1; echo "check rc=$? t=$SECONDS"; summary $T/check-push.log
for n in 8 4; do
  [ $SECONDS -gt 470 ] && break
  timeout 70 $P bench reduce-scatter --procs $n --backend cupy -b 64 -e 1M -f 8 --no-inplace --strategy all \
    > $T/rs-p$n.log 2>&1; echo "rc=$? t=$SECONDS"; rows "rs p$n" $T/rs-p$n.log | grep -v ring
done
