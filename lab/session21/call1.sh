#!/usr/bin/env bash
# Session 21, call 1: session 20's call5 split to fit one call. .snapnew = git archive of
# branch pooled-variable, .snapmain = of main. Exactness of every -v strategy compiled at 8
# virtual ranks on the branch, then the skewed -v defaults 512 KiB-16 MiB (compiled, so the
# branch pools) with torch beside, branch and main alternating. A row set is skipped once
# ${STOP:-540} s have gone, so the logs still come back.
source lab/device-prelude.sh
R=$PWD
C="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all --backend cupy"
if [ "${CHECK:-1}" = 1 ]; then
  ( use_tree .snapnew
    timeout 120 $P check $C --ranks 8 --kernel compiled > $T/check-compiled.log 2>&1; echo "check compiled rc=$?"
    summary $T/check-compiled.log )
fi
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for c in ${COUNTS:-skewed}; do
  for x in ${COLLS:-reduce-scatter-v all-gather-v all-to-all-v}; do
    for tree in .snapnew .snapmain; do
      [ $SECONDS -gt ${STOP:-540} ] && { echo "skip $tree $x $c"; continue; }
      ( cd $R && use_tree $tree && go $tree-$x-$c 100 $x ${RANGE:--b 512K -e 16M -f 2} --counts $c ${EXTRA:-} )
    done
  done
done
