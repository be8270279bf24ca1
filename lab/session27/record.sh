#!/usr/bin/env bash
# Issue 31's record in one call, both distributions: 8 virtual ranks, float32, the three -v
# collectives at 8 B and 16 B-256 MiB (-f 4), JSON under $OUT/logs.tgz, from the tree at $1
# (default: the repository root). Session 24 took under 70 s a collective to 64 MiB.
source lab/device-prelude.sh
use_tree ${1:-$PWD}
X=all-gather-v,reduce-scatter-v,all-to-all-v
for d in skewed uniform; do
  V="--backend cupy --no-inplace -n 10 -w 2 -G 3 --counts $d"
  go tiny-$d 40 $X -b 8 -e 8 --json $T/tiny-$d.json
  go all-$d 260 $X -b 16 -e 256M -f 4 --json $T/all-$d.json
done
