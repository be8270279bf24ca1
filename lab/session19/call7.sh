#!/usr/bin/env bash
# Issue 30's 1 MiB rows at 2, 4, 8 processes and the Communicator after the flag lists
# (zero-copy, 64 B, under MPS); issue 31: reduce-scatter-v strategies at 4-32 MiB skewed
# one at a time (ring is refused by the compiled datapath there), all-to-all-v at 512 KiB
# with 1 and 8 channels.
source lab/device-prelude.sh
mps_on
use_tree .snap
for n in 8 4 2; do
  timeout 40 $P bench all-reduce,reduce-scatter,all-gather --procs $n --backend cupy -b 1M -e 1M --no-inplace \
    > $T/m$n.log 2>&1; echo "m$n rc=$? t=$SECONDS"; rows "m$n" $T/m$n.log
done
for n in 8 2; do
  timeout 60 $TR $n lab/issue30/comm_host.py --bytes 64 --zero-copy > $T/comm-host-p$n.log 2>&1
  echo "comm p$n rc=$?"; grep comm-host $T/comm-host-p$n.log | sort | head -8
done
echo quit | nvidia-cuda-mps-control
V="--backend cupy --no-inplace -n 10 -w 2 -G 3 --counts skewed --kernel compiled"
go() {
  local label=$1 t=$2; shift 2
  timeout $t $P bench "$@" $V > $T/$label.log 2>&1
  echo "== $label rc=$? t=$SECONDS"
  grep -E "^ +[0-9]|strategy|geometric|rror" $T/$label.log | cut -c1-160 | head -40
}
go rsv-direct 60 reduce-scatter-v -b 4M -e 32M -f 8 --strategy direct
go rsv-direct8 60 reduce-scatter-v -b 4M -e 32M -f 8 --strategy direct --channels 8
go rsv-twoshot 60 reduce-scatter-v -b 4M -e 32M -f 8 --strategy two-shot
go rsv-twoshot8 60 reduce-scatter-v -b 4M -e 32M -f 8 --strategy two-shot --channels 8
go a2av-c1 40 all-to-all-v -b 256K -e 2M -f 2 --strategy push --channels 1
go a2av-c8 40 all-to-all-v -b 256K -e 2M -f 2 --strategy push --channels 8
