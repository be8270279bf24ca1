#!/usr/bin/env bash
# Session 23, call 1: vector loads in the sources' alignment with element stores
# (SPLIT_LOADS, atoms/snac.cu) against main (.snapmain = git archive main): a quick
# exactness check of the default path first, then the -v collectives new vs main side
# by side, then the wider checks. Steps are skipped past ${STOP:-520} s.
source lab/device-prelude.sh
R=$PWD
V3="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all"
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
bench_pair() {
for x in "$@"; do
  for tree in $R .snapmain; do
    [ $SECONDS -gt ${STOP:-520} ] && { echo "skip $tree $x"; continue; }
    lbl=$([ $tree = $R ] && echo new || echo main)
    ( cd $R && use_tree $tree && go $lbl-$x 90 $x ${RANGE:--b 512K -e 32M -f 4} --counts ${COUNTS:-skewed} ${EXTRA:-} )
  done
done
}
bench_pair reduce-scatter-v
ck v-compiled 100 $V3 --ranks 3,8 --kernel compiled -d float32,bfloat16
bench_pair all-gather-v all-to-all-v
ck v-interp 120 $V3 --ranks 3,8 -d float32,bfloat16,float8_e4m3fn,float64 --kernel interpreted
ck fixed-interp 90 all-gather,reduce-scatter,all-reduce,all-to-all,gather,scatter --strategy all --ranks 3 \
  --count 1001 -d float32,bfloat16 --kernel interpreted
ck fixed-compiled 90 all-gather,reduce-scatter,all-reduce,all-to-all --strategy all --ranks 3 --count 1001 \
  --kernel compiled -d float32,bfloat16
