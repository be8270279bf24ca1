#!/usr/bin/env bash
# Session 20, call 2: all-gather-v (copies) old vs 8 vs 16; all-to-all-v skewed 256 KiB-4 MiB
# one vs eight channels after the change; reduce-scatter-v uniform beside (unchanged code path).
source lab/device-prelude.sh
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for tree in .snapold .snapnew .snap16; do
  ( use_tree $tree
    for c in uniform skewed; do go $tree-agv-$c 50 all-gather-v -b 512K -e 32M -f 8 --counts $c; done )
done
( use_tree .snapnew
  for ch in 1 8; do go a2av-sk-c$ch 50 all-to-all-v -b 256K -e 4M -f 2 --counts skewed --strategy push --channels $ch --kernel compiled; done
  go rsv-u 60 reduce-scatter-v -b 16 -e 256M -f 8 --counts uniform
  go rsv-s 60 reduce-scatter-v -b 16 -e 256M -f 8 --counts skewed
)
