#!/usr/bin/env bash
# Session 22, call 2: the GPU tests of the variable collectives and the compiled datapath
# on the shifted vector path, the fixed collectives compiled at an unaligned count, then
# the large rows new vs main (.snapmain). Steps skipped past ${STOP:-520} s.
source lab/device-prelude.sh
R=$PWD
if [ "${TESTS:-1}" = 1 ]; then
  ( use_tree $R; timeout 200 python3 -m pytest -q -x -m gpu tests/gpu/test_gpu_variable.py -p no:cacheprovider \
      > $T/pytest-variable.log 2>&1; echo "== pytest variable rc=$? t=$SECONDS"; tail -3 $T/pytest-variable.log )
  ( use_tree $R; timeout 150 $P check all-gather,reduce-scatter,all-reduce,all-to-all --strategy all --ranks 3,8 \
      --count 1001 -d float32,bfloat16 --kernel compiled --backend cupy --failed-only > $T/fixed-compiled.log 2>&1
    echo "== fixed compiled rc=$? t=$SECONDS"; summary $T/fixed-compiled.log )
fi
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for x in ${COLLS:-reduce-scatter-v all-gather-v}; do
  for tree in $R .snapmain; do
    [ $SECONDS -gt ${STOP:-520} ] && { echo "skip $tree $x"; continue; }
    lbl=$([ $tree = $R ] && echo new || echo main)
    ( cd $R && use_tree $tree && go $lbl-$x-big 150 $x ${RANGE:--b 32M -e 256M -f 8} --counts ${COUNTS:-skewed} )
  done
done
