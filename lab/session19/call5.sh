#!/usr/bin/env bash
# Issue 31, 8 virtual ranks (no MPS): which strategy a large variable reduction wants.
# reduce-scatter-v's default is direct with one channel, whose rows at 4-32 MiB take
# 0.33-0.42x torch's speed (session 15): under skewed counts one consumer's blocks do
# most of the sums. --strategy all times every derived strategy beside torch; then
# direct with 8 channels; then all-to-all-v's compiled default, never timed.
source lab/device-prelude.sh
use_tree .snap
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
go() {
  local label=$1 t=$2; shift 2
  timeout $t $P bench "$@" $V > $T/$label.log 2>&1
  echo "== $label rc=$? t=$SECONDS"
  grep -E "^ +[0-9]|strategy|geometric|rror" $T/$label.log | cut -c1-160 | head -60
}
go rsv-skewed 170 reduce-scatter-v -b 1M -e 256M -f 8 --counts skewed --strategy all --kernel compiled
go rsv-uniform 130 reduce-scatter-v -b 1M -e 256M -f 8 --counts uniform --strategy all --kernel compiled
go rsv-direct-c8 60 reduce-scatter-v -b 1M -e 32M -f 8 --counts skewed --strategy direct --channels 8 --kernel compiled
go a2av-default 100 all-to-all-v -b 16 -e 256M -f 8 --counts skewed
go agv-skewed $((560 - SECONDS)) all-gather-v -b 1M -e 256M -f 8 --counts skewed --strategy all --kernel compiled
