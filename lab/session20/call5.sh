#!/usr/bin/env bash
# Session 20, call 5 (not run: the device time was spent). .snapmain = git archive of main,
# .snapnew = git archive of branch
# pooled-variable (every block pooled over every op where a variable launch has no flags, on
# top of main's four loads in flight and two-shot's rotated parts): exactness first
# (every strategy compiled, 8 virtual ranks), then the three -v defaults uniform and skewed
# with torch beside: 512 KiB-16 MiB (where the default is compiled and so pools), and
# 32-256 MiB forced compiled (the default's interpreter there pools nothing: D12 counts
# capacity buffers). Compare with the same rows of main, run alternately.
# Too long for one call: run `TREES=.snapnew bash lab/session20/call5.sh`, then
# `CHECK=0 TREES=.snapmain bash lab/session20/call5.sh` (and again for the alternation).
source lab/device-prelude.sh
R=$PWD
use_tree .snapnew
C="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all --backend cupy"
if [ "${CHECK:-1}" = 1 ]; then
  timeout 90 $P check $C --ranks 8 --kernel compiled > $T/check-compiled.log 2>&1; echo "check compiled rc=$?"
  summary $T/check-compiled.log
fi
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for tree in ${TREES:-.snapnew}; do
  ( cd $R && use_tree $tree
    for c in skewed uniform; do
      for x in reduce-scatter-v all-gather-v all-to-all-v; do
        go $tree-$x-$c 60 $x -b 512K -e 16M -f 2 --counts $c
        go $tree-$x-$c-big 90 $x -b 32M -e 256M -f 8 --counts $c --kernel compiled
      done
    done )
done
