#!/usr/bin/env bash
# Branch pooled-occupancy: pooled variable launches built for two blocks an SM (64 registers,
# sm_90, 4-byte types) against main, 1-256 MiB, both distributions. Run from main's tree;
# carry [".whl", ".kcache.tgz"] and .snapocc = `git archive pooled-occupancy` (untracked).
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
M="main=$R occ=$R/.snapocc"
for d in skewed uniform; do
  trees big-$d 120 "$M" all-gather-v,reduce-scatter-v -b 1M -e 256M -f 4 --counts $d
done
R=$R/.snapocc STOP=520 ck vocc 70 all-gather-v,reduce-scatter-v --strategy all --counts all --ranks 8 \
  --count 300000 --kernel compiled -d float32,int32
