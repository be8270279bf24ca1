#!/usr/bin/env bash
# Session 17, device call 7: the virtual-rank path before (.snap2 = 7815825) and after (.snap =
# HEAD) batched releases and merged copies, same machine, alternating: its rows must stay within 3%.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T=/tmp/logs; mkdir -p $T
trap 'tar -czf $OUT/logs.tgz -C $T .' EXIT
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
for rep in 1 2; do
  for tree in .snap2 .snap; do
    ( cd $tree && PYTHONPATH=/tmp/site:$PWD timeout 60 python3 -m purlin_bench bench all-reduce,all-gather \
      --backend cupy -b 8 -e 256K -f 8 --no-inplace > $T/vr-$tree-$rep.log 2>&1 ); echo "$tree rc=$?"
    grep -E "^ +[0-9]" $T/vr-$tree-$rep.log | awk '{print "'"$tree $rep"'", $1, $6}' | paste -sd' ' | cut -c1-200
    grep -iE "geomean|geometric" $T/vr-$tree-$rep.log | head -2
  done
done
