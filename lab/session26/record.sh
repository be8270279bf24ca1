#!/usr/bin/env bash
# Issue 31's record, one distribution a call (`bash lab/session26/record.sh skewed`, then
# uniform): 8 virtual ranks, float32, the three -v collectives at 16 B-256 MiB (-f 4) and
# 8 B, results as JSON under $OUT/logs.tgz. Run it on the H200 (the tool says which card came).
source lab/device-prelude.sh
R=$PWD; use_tree $R
d=${1:-skewed}
V="--backend cupy --no-inplace -n 10 -w 2 -G 3 --counts $d"
X=all-gather-v,reduce-scatter-v,all-to-all-v
go tiny-$d 60 $X -b 8 -e 8 --json $T/tiny-$d.json
go all-$d 500 $X -b 16 -e 256M -f 4 --json $T/all-$d.json
