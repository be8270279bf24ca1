#!/usr/bin/env bash
# Session 24, call 4: the pooled walk made cheap (codegen/variable.py pooled_code: an op
# before a block's share costs a count read and an add, 32-bit arithmetic) in the tree,
# against .snapA (main + small-split-loads.patch: call 1's build), skewed 16 B-4 MiB;
# the compiled -v check; .snapG (the tree with all-to-all-v's 64 ops pooled) against
# the tree; then the tree's rows to 64 MiB for the performance page.
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for x in all-gather-v reduce-scatter-v; do
  for t in new A; do ( [ $t = A ] && cd .snapA; use_tree $PWD; go $t-$x 45 $x -b 16 -e 4M -f 4 --counts skewed ); done
done
STOP=200 ck vcomp 60 all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all --ranks 3,8 --kernel compiled \
  -d float32
for t in G new; do ( [ $t = G ] && cd .snapG; use_tree $PWD; go $t-all-to-all-v 45 all-to-all-v -b 16 -e 4M -f 4 --counts skewed ); done
for c in skewed uniform; do for x in all-gather-v reduce-scatter-v; do
  [ $SECONDS -lt 270 ] && go m-$x-$c 50 $x -b 16 -e 64M -f 4 --counts $c; done; done
