#!/usr/bin/env bash
# Issue 31's record in one call from the tree at $1 (default: the repository root): 8 virtual
# ranks, float32, the three -v collectives at 8 B and 16 B-256 MiB (-f 4), both distributions,
# JSON under $OUT/logs.tgz; then `python3 lab/scripts/v_target.py logs/{tiny,all}-{skewed,uniform}.json`.
# Timing: bench's own defaults (-n 20 -w 5 -G 5), or $TIMING (session 27: "-n 10 -w 2 -G 3");
# the timing is a small part of a row's time, setup and the checks most of it.
source lab/device-prelude.sh
use_tree ${1:-$PWD}
X=all-gather-v,reduce-scatter-v,all-to-all-v
for d in skewed uniform; do
  V="--backend cupy --no-inplace ${TIMING:-} --counts $d"
  go tiny-$d 40 $X -b 8 -e 8 --json $T/tiny-$d.json
  go all-$d 270 $X -b 16 -e 256M -f 4 --json $T/all-$d.json
done
