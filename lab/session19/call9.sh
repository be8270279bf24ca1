#!/usr/bin/env bash
# D50 before (.snap = 7a32893) and after (.snapnew): the untuned default rows of
# all-to-all-v at 256 KiB-4 MiB S and reduce-scatter-v at 2-64 MiB, skewed and uniform.
source lab/device-prelude.sh
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
go() { local label=$1 t=$2; shift 2; timeout $t $P bench "$@" $V > $T/$label.log 2>&1
  echo "== $label rc=$? t=$SECONDS"; grep -E "^ +[0-9]|strategy|rror" $T/$label.log | paste - - | awk '{print $1, $6, $0}' \
    | sed -E 's/ +[0-9]+ +[0-9]+ +float.*strategy/ /; s/; floor.*//' | cut -c1-150; }
for tree in .snap .snapnew; do
  ( use_tree $tree
    for c in skewed uniform; do
      go $tree-a2av-$c 30 all-to-all-v -b 256K -e 4M -f 2 --counts $c
      go $tree-rsv-$c 40 reduce-scatter-v -b 2M -e 64M -f 2 --counts $c
    done )
done
