#!/usr/bin/env bash
# Session 25, call 16 (a device budget under 10 minutes left): flat at every size against
# main (.snapprev = git archive 89be8a0), skewed, 16 B-4 MiB, and the flat kernels' exactness.
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for x in all-gather-v reduce-scatter-v; do
  for t in flat main; do ( [ $t = main ] && cd .snapprev; use_tree $PWD; go $t-$x 50 $x -b 16 -e 4M -f 4 --counts skewed ); done
done
STOP=230 ck vflat 60 all-gather-v,reduce-scatter-v --strategy all --counts all --ranks 3,8 --kernel compiled -d float32
[ $SECONDS -lt 260 ] && for x in all-gather-v reduce-scatter-v; do go u-flat-$x 30 $x -b 16 -e 4M -f 4 --counts uniform; done
