#!/usr/bin/env bash
# The next session's first call (not run: no device time was left in session 24): the
# count loader without id/cap arrays (392e6db, untimed) against the build before it
# (.snapprev = `git archive ec35afc`, carried), skewed 16 B-64 MiB, then its exactness
# (compiled -v at 3 and 8 ranks, the -v GPU tests, --procs 8 under MPS) and uniform rows.
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
V3="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all"
for x in all-to-all-v all-gather-v reduce-scatter-v; do
  for t in new prev; do ( [ $t = prev ] && cd .snapprev; use_tree $PWD; go $t-$x 60 $x -b 16 -e 64M -f 4 --counts skewed ); done
done
ck vcomp 120 $V3 --ranks 3,8 --kernel compiled -d float32
timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -p no:cacheprovider > $T/pytest-v.log 2>&1
echo "== pytest rc=$?"; tail -2 $T/pytest-v.log
for x in all-to-all-v all-gather-v reduce-scatter-v; do go u-$x 60 $x -b 16 -e 64M -f 4 --counts uniform; done
mps_on
STOP=560 ck procs8 40 $V3 --procs 8 --mps -d float32
