#!/usr/bin/env bash
# D50 before (.snap = 7a32893) and after (.snapnew): the untuned default rows of
# all-to-all-v skewed at 256 KiB-2 MiB S and reduce-scatter-v at 4-32 MiB, skewed and uniform
# (the rows D50 changes; 393 s of device time were left).
source lab/device-prelude.sh
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
go() { local label=$1 t=$2; shift 2; timeout $t $P bench "$@" $V > $T/$label.log 2>&1
  echo "== $label rc=$? t=$SECONDS"; grep -E "^ +[0-9]|strategy|rror" $T/$label.log | paste - - | awk '{print $1, $6, $0}' \
    | sed -E 's/ +[0-9]+ +[0-9]+ +float.*strategy/ /; s/; floor.*//' | cut -c1-150; }
for tree in .snap .snapnew; do
  ( use_tree $tree
    go $tree-a2av-skewed 25 all-to-all-v -b 256K -e 2M -f 2 --counts skewed
    for c in skewed uniform; do go $tree-rsv-$c 25 reduce-scatter-v -b 4M -e 32M -f 2 --counts $c; done )
done
