#!/usr/bin/env bash
# Session 20, call 5 (not run: the device time was spent). .snapnew = git archive of branch
# pooled-variable (every block pooled over every op where a variable launch has no flags, on
# top of main's four loads in flight and two-shot's rotated parts): exactness first
# (every strategy compiled, 8 virtual ranks), then the three -v defaults uniform and skewed
# (16 B-256 MiB, every 64x) with torch beside. Cut to fit the device time left.
source lab/device-prelude.sh
use_tree .snapnew
C="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all --backend cupy"
timeout 90 $P check $C --ranks 8 --kernel compiled > $T/check-compiled.log 2>&1; echo "check compiled rc=$?"
summary $T/check-compiled.log
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
go() {
  local label=$1 t=$2; shift 2
  timeout $t $P bench "$@" $V > $T/$label.log 2>&1; echo "== $label rc=$? t=$SECONDS"; rows "$label" $T/$label.log
  grep -E "rror|geometric" $T/$label.log | cut -c1-150
}
for c in skewed uniform; do
  for x in reduce-scatter-v all-gather-v all-to-all-v; do go $x-$c 50 $x -b 16 -e 256M -f 64 --counts $c; done
done
