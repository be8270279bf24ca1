#!/usr/bin/env bash
# Session 20, call 1: unaligned copies with ELEM_BATCH loads in flight a thread.
# .snapold = HEAD 140a8ab (one element at a time), .snapnew = the change (8), .snap16 (16);
# all-to-all-v uniform and skewed at 512 KiB-32 MiB S, the trees alternating, torch beside.
source lab/device-prelude.sh
which nsys ncu 2>&1 | head -2
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for round in 1 2; do
  for tree in .snapold .snapnew .snap16; do
    ( use_tree $tree
      for c in uniform skewed; do go $tree-a2av-$c-$round 50 all-to-all-v -b 512K -e 32M -f 8 --counts $c; done )
  done
done
