#!/usr/bin/env bash
# For the next session, under MPS: the compiled kernels' flag lists as one warp instruction
# (atoms/flags.cu: a release of 7 flags was 7 system fences in a row, a wait on 7 flags 7
# polls in turn). .snap = git archive HEAD, .snap2 = git archive 744c6eb (before), alternating
# in one session on one machine. Then exactness after it: check at 8 processes, every
# strategy, compiled, plain and with the jitter test mode; the compiled GPU tests.
source lab/device-prelude.sh
mps_on
B="bench reduce-scatter,all-reduce --backend cupy -b 64 -e 64K -f 8 --no-inplace"
for n in 8 4 2; do
  for tree in .snap2 .snap; do
    ( use_tree $tree && timeout 50 $P $B --procs $n > $T/p$n$tree.log 2>&1 ); echo "p$n $tree rc=$? t=$SECONDS"
    rows "p$n $tree" $T/p$n$tree.log
  done
done
for tree in .snap2 .snap .snap2 .snap; do
  ( use_tree $tree && timeout 40 $P bench all-reduce,all-gather --backend cupy -b 8 -e 256K -f 8 --no-inplace \
    > $T/vr$tree-$SECONDS.log 2>&1 ); echo "vr $tree rc=$?"; grep -h "geometric" $T/vr$tree-*.log | tail -1
done
use_tree .snap
C="check reduce-scatter,all-reduce,all-gather,all-to-all --procs 8 --backend cupy --kernel compiled --strategy all"
timeout 90 $P $C --count 1001 > $T/check-p8.log 2>&1; echo "check rc=$? t=$SECONDS"; summary $T/check-p8.log
PURLIN_JITTER=2000 timeout 90 $P $C --count 1001 > $T/check-p8-jitter.log 2>&1; echo "jitter rc=$?"
summary $T/check-p8-jitter.log
timeout $((570 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -m gpu --timeout 150 -rfE --tb=short \
  tests/gpu/test_gpu_compiled.py tests/gpu/test_gpu_comm_procs.py \
  --deselect tests/gpu/test_gpu_compiled.py::test_jitter_keeps_every_result > $T/pytest.log 2>&1
echo "pytest rc=$? t=$SECONDS"; tail -5 $T/pytest.log
