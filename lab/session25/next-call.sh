#!/usr/bin/env bash
# The next session's first call (not run: no device time was left in session 25). Carry
# [".whl", ".kcache.tgz"] and .snapprev = `git archive c7701d0` (flat, the check on thread 0
# of block 0) extracted in the repository root (untracked: delete it before committing).
# 1. the counts' check on the grid's last thread (d82cc5a, untimed) against c7701d0, skewed,
#    16 B-1 MiB; 2. the whole range for the record, 16 B-256 MiB both distributions
#    (on the H200 if the tool gives one); 3. exactness: compiled -v in 16-bit types, the -v GPU
#    tests, --procs 8 under MPS (the check moved in every compiled variable kernel).
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
V3="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all"
for x in all-gather-v reduce-scatter-v; do
  for t in new prev; do ( [ $t = prev ] && cd .snapprev; use_tree $PWD; go $t-$x 40 $x -b 16 -e 1M -f 4 --counts skewed ); done
done
timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -p no:cacheprovider > $T/pytest-v.log 2>&1
echo "== pytest rc=$?"; tail -2 $T/pytest-v.log
for d in skewed uniform; do
  for x in all-gather-v reduce-scatter-v all-to-all-v; do [ $SECONDS -lt 480 ] && go all-$x-$d 80 $x -b 16 -e 256M -f 4 --counts $d; done
done
mps_on
STOP=500 ck procs8 50 $V3 --procs 8 --mps -d float32
STOP=540 ck v16 50 all-gather-v,reduce-scatter-v --strategy all --counts all --ranks 3,8 --kernel compiled \
  -d bfloat16,float16
