#!/usr/bin/env bash
# Session 17, device call 7: the virtual-rank path before (.snap2 = 7815825) and after (.snap =
# HEAD) batched releases and merged copies, same machine, alternating: its rows must stay within 3%.
source lab/device-prelude.sh
for rep in 1 2; do
  for tree in .snap2 .snap; do
    ( use_tree $tree && timeout 60 $P bench all-reduce,all-gather \
      --backend cupy -b 8 -e 256K -f 8 --no-inplace > $T/vr-$tree-$rep.log 2>&1 ); echo "$tree rc=$?"
    grep -E "^ +[0-9]" $T/vr-$tree-$rep.log | awk '{print "'"$tree $rep"'", $1, $6}' | paste -sd' ' | cut -c1-200
    grep -iE "geomean|geometric" $T/vr-$tree-$rep.log | head -2
  done
done
