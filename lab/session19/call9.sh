#!/usr/bin/env bash
# Not run in session 19 (no device time left): D50's default rows before (.snap =
# git archive 7a32893) and after (.snapnew = git archive of HEAD): all-to-all-v skewed
# and uniform at 256 KiB-4 MiB S, the rows whose channel count D50 changed or kept.
source lab/device-prelude.sh
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
go() {  # the prelude's rows() prints what came back, a line a row
  local label=$1 t=$2; shift 2
  timeout $t $P bench "$@" $V > $T/$label.log 2>&1; echo "== $label rc=$? t=$SECONDS"; rows "$label" $T/$label.log
}
for tree in .snap .snapnew .snap .snapnew; do
  ( use_tree $tree
    for c in skewed uniform; do go $tree-a2av-$c-$SECONDS 30 all-to-all-v -b 256K -e 4M -f 2 --counts $c; done )
done
