#!/usr/bin/env bash
# Session 28's first call (written without a device; run it from main's tree, carry
# [".whl", ".kcache.tgz"], about 520 s). Untracked snapshots first, from the repository root:
#   rm -rf .snapruns .snaprun .snapboth && mkdir .snapruns .snaprun .snapboth
#   git archive a2av-runs | tar -x -C .snapruns; git archive flat-run-bound | tar -x -C .snaprun
#   git archive s28-both | tar -x -C .snapboth   # main + a2av-runs + counts-direct, merged
# 1. Where small all-gather-v time goes (lab/scripts/variable_gap.py): the default's kernel
#    launched bare minus one thing at a time, beside torch and the fixed all-gather.
# 2. a2av-runs (all-to-all-v at 8 ranks flat over its senders' runs, to 16 KiB of runs)
#    against main, 16 B-16 KiB, both distributions, and its exactness (check, 3 and 8 ranks).
# 3. The -v GPU tests (bench-level, and the Communicator's under torchrun, which
#    counts-direct changes: the kernel reads the caller's counts tensor) from .snapboth.
source lab/device-prelude.sh
R=$PWD
timeout 120 python3 lab/scripts/variable_gap.py --collective all-gather-v --bytes 8,64,256,16K --counts skewed \
  > $T/gap-agv.log 2>&1
echo "== gap-agv rc=$? t=$SECONDS"; grep -vE "^\s*$" $T/gap-agv.log | tail -48
V="--backend cupy --no-inplace -n 20 -w 5 -G 5"
for d in skewed uniform; do
  trees runs-$d 50 "main=$R runs=$R/.snapruns" all-to-all-v -b 16 -e 16K -f 4 --counts $d
done
STOP=330 R=$R/.snapruns ck runs 60 all-to-all-v --strategy all --counts all --ranks 3,8 --count 3,40 \
  --kernel compiled -d float32
[ $SECONDS -lt 400 ] && ( use_tree $R/.snapboth; timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py \
  tests/gpu/test_gpu_comm_procs.py -k "serves or captured or count or variable" -p no:cacheprovider > $T/pytest-v.log 2>&1
  echo "== pytest rc=$? t=$SECONDS"; tail -3 $T/pytest-v.log )
