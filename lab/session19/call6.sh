#!/usr/bin/env bash
# Issue 30's targets at HEAD after the flag lists (call3: push-parity now faster than ipc
# at 2, 4 and 8 processes from 64 B to 32 KiB): every default row 8 B-1 MiB, three
# collectives, ipc beside it; then issue 31's reduce-scatter-v strategies (call5.sh).
source lab/device-prelude.sh
mps_on
use_tree .snap
for n in 8 4 2; do
  timeout 80 $P bench all-reduce,reduce-scatter,all-gather --procs $n --backend cupy -b 8 -e 1M -f 8 --no-inplace \
    > $T/t$n.log 2>&1; echo "t$n rc=$? t=$SECONDS"; rows "t$n" $T/t$n.log
done
echo quit | nvidia-cuda-mps-control
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
go() {
  local label=$1 t=$2; shift 2
  timeout $t $P bench "$@" $V > $T/$label.log 2>&1
  echo "== $label rc=$? t=$SECONDS"
  grep -E "^ +[0-9]|strategy|geometric|rror" $T/$label.log | cut -c1-160 | head -60
}
go rsv-skewed $((420 - SECONDS)) reduce-scatter-v -b 1M -e 256M -f 8 --counts skewed --strategy all --kernel compiled
go a2av-default $((560 - SECONDS)) all-to-all-v -b 16 -e 256M -f 8 --counts skewed
