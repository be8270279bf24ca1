#!/usr/bin/env bash
# Session 25, call 18 (as run, on one line): D50's channel bound, all-to-all-v skewed.
source lab/device-prelude.sh; R=$PWD; use_tree $R; V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for c in 1 8; do
  go a2av-c$c-skewed 45 all-to-all-v -b 256K -e 4M -f 2 --counts skewed --strategy push --channels $c
done
go a2av-def-skewed 40 all-to-all-v -b 256K -e 4M -f 2 --counts skewed
