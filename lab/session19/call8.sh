#!/usr/bin/env bash
# After the flag lists (b745508): the -v collectives compiled, every strategy, at 3 and 8
# virtual ranks and 8 processes under MPS (their waits name lists too). Then issue 31's
# defaults: all-to-all-v uniform with 1 and 8 channels at 512 KiB-4 MiB S (skewed: one
# channel wins from 512 KiB, call7), reduce-scatter-v direct vs two-shot at 8-256 MiB.
source lab/device-prelude.sh
use_tree .snap
C="check all-gather-v,reduce-scatter-v,all-to-all-v --backend cupy --kernel compiled --strategy all --counts all"
timeout 100 $P $C --ranks 3,8 > $T/check-v.log 2>&1; echo "check-v rc=$? t=$SECONDS"; summary $T/check-v.log
mps_on
timeout 100 $P $C --procs 8 > $T/check-v-p8.log 2>&1; echo "check-v p8 rc=$? t=$SECONDS"; summary $T/check-v-p8.log
echo quit | nvidia-cuda-mps-control
V="--backend cupy --no-inplace -n 10 -w 2 -G 3 --kernel compiled"
go() {
  local label=$1 t=$2; shift 2
  timeout $t $P bench "$@" $V > $T/$label.log 2>&1
  echo "== $label rc=$? t=$SECONDS"
  grep -E "^ +[0-9]|strategy|rror" $T/$label.log | paste - - | awk '{print $1, $6, $0}' \
    | sed -E 's/ +[0-9]+ +[0-9]+ +float.*strategy/ /; s/; floor.*//' | cut -c1-150; }
go a2av-u-c1 40 all-to-all-v -b 512K -e 4M -f 2 --counts uniform --strategy push --channels 1
go a2av-u-c8 40 all-to-all-v -b 512K -e 4M -f 2 --counts uniform --strategy push --channels 8
for c in skewed uniform; do
  go rsv-$c-direct 60 reduce-scatter-v -b 8M -e 256M -f 4 --counts $c --strategy direct
  go rsv-$c-twoshot 60 reduce-scatter-v -b 8M -e 256M -f 4 --counts $c --strategy two-shot
done
