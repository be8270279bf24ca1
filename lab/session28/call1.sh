#!/usr/bin/env bash
# Session 28's first call (written without a device; run it from main's tree, carry
# [".whl", ".kcache.tgz"]). Untracked snapshots first, from the repository root:
#   rm -rf .snapruns .snaprun .snapboth && mkdir .snapruns .snaprun .snapboth
#   git archive a2av-runs | tar -x -C .snapruns; git archive flat-run-bound | tar -x -C .snaprun
#   git archive s28-both | tar -x -C .snapboth   # main + a2av-runs + counts-direct, merged
# 1. Where small -v time goes (lab/scripts/variable_gap.py): the default's kernel launched bare
#    minus one thing at a time, beside torch and the fixed all-gather (about 90 s).
# 2. a2av-runs (all-to-all-v at 8 ranks flat over its senders' runs up to 16 KiB of runs)
#    against main, 8 B-64 KiB, both distributions; flat-run-bound against main, 256 KiB-4 MiB.
# 3. The branches' exactness: check at 3 and 8 virtual ranks, every strategy, and the GPU
#    tests of the -v collectives (bench-level, and the Communicator's under torchrun, which
#    counts-direct changes: the kernel reads the caller's counts tensor) from .snapboth.
source lab/device-prelude.sh
R=$PWD
G="python3 lab/scripts/variable_gap.py --iters 50 --reps 15"
timeout 120 $G --collective all-gather-v --bytes 8,64,256,16K --counts skewed > $T/gap-agv.log 2>&1
echo "== gap-agv rc=$? t=$SECONDS"; grep -vE "^\s*$" $T/gap-agv.log | tail -48
timeout 90 $G --collective all-to-all-v,reduce-scatter-v --bytes 16,64 --counts skewed > $T/gap-a2av.log 2>&1
echo "== gap-a2av rc=$? t=$SECONDS"; grep -vE "^\s*$" $T/gap-a2av.log | tail -40
V="--backend cupy --no-inplace -n 20 -w 5 -G 5"
for d in skewed uniform; do
  trees runs-$d 70 "main=$R runs=$R/.snapruns" all-to-all-v -b 8 -e 64K -f 2 --counts $d
  trees run-$d 70 "main=$R run=$R/.snaprun" reduce-scatter-v -b 256K -e 4M -f 2 --counts $d
done
STOP=420
R=$R/.snapruns ck runs 70 all-to-all-v --strategy all --counts all --ranks 3,8 --count 3,40 --kernel compiled \
  -d float32,bfloat16
R=$R/.snaprun ck run 50 reduce-scatter-v --strategy direct --counts all --ranks 3,8 --count 100000,250000 \
  --kernel compiled -d float32,bfloat16
[ $SECONDS -lt 440 ] && ( use_tree $R/.snapboth; timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py \
  tests/gpu/test_gpu_comm_procs.py -k "serves or captured or count or variable" -p no:cacheprovider > $T/pytest-v.log 2>&1
  echo "== pytest rc=$? t=$SECONDS"; tail -3 $T/pytest-v.log )
# 4. If time is left: all-to-all-v at 512 KiB-2 MiB skewed (1 MiB: 0.89x torch on one channel, D50)
#    on 1, 2, 4 and 8 channels; the default takes 1 there and 8 below 2.5 MiB of rank input.
for c in 1 2 4 8; do
  [ $SECONDS -lt 520 ] && go ch$c 30 all-to-all-v -b 512K -e 2M -f 2 --counts skewed --channels $c
done
