#!/usr/bin/env bash
# Session 22, call 1: the shifted vector path (move_op: sources and destinations at
# different offsets within 16 bytes). The working tree is "new", .snapmain = git archive
# of main. Exactness first (variable and fixed collectives at unaligned counts, both
# datapaths, dtypes of 1, 2, 4 and 8 bytes), then new and main benched side by side.
# A step is skipped once ${STOP:-520} s have gone, so the logs still come back.
source lab/device-prelude.sh
R=$PWD
V3="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all"
if [ "${CHECK:-1}" = 1 ]; then
  ck v-interp 150 $V3 --ranks 3,8 -d float32,bfloat16,float8_e4m3fn,float64 --kernel interpreted
  ck v-compiled 120 $V3 --ranks 8 --kernel compiled
  ck fixed-interp 120 all-gather,reduce-scatter,all-reduce,all-to-all,gather,scatter --strategy all --ranks 3 \
    --count 1001 -d float32,bfloat16 --kernel interpreted
  ck fixed-compiled 90 all-gather,reduce-scatter,all-reduce,all-to-all --strategy all --ranks 3 --count 1001 \
    --kernel compiled
fi
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for x in ${COLLS:-reduce-scatter-v all-gather-v all-to-all-v}; do
  for tree in $R .snapmain; do
    [ $SECONDS -gt ${STOP:-520} ] && { echo "skip $tree $x"; continue; }
    lbl=$([ $tree = $R ] && echo new || echo main)
    ( cd $R && use_tree $tree && go $lbl-$x 100 $x ${RANGE:--b 512K -e 16M -f 4} --counts ${COUNTS:-skewed} ${EXTRA:-} )
  done
done
for tree in $R .snapmain; do
  [ $SECONDS -gt ${STOP:-520} ] && { echo "skip small $tree"; continue; }
  lbl=$([ $tree = $R ] && echo new || echo main)
  ( cd $R && use_tree $tree && go $lbl-ar-small 80 all-reduce -b 8 -e 64K -f 8 )
done
