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
# all-to-all-v's 64 ops pooled again, now that the walk (D56) and the count loader are cheap
# (D58's 12.8 us at 16 B had both the old walk and 768-byte id/cap arrays a thread).
rm -rf /tmp/pool64 && cp -r $R /tmp/pool64 && sed -i 's/^POOL_MAX_OPS = 8$/POOL_MAX_OPS = 64/' \
  /tmp/pool64/purlin_bench/backends/cupy/codegen/variable.py
( cd /tmp/pool64 && use_tree . && go pool64-all-to-all-v 60 all-to-all-v -b 16 -e 64M -f 4 --counts skewed )
ck vcomp 120 $V3 --ranks 3,8 --kernel compiled -d float32
timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -p no:cacheprovider > $T/pytest-v.log 2>&1
echo "== pytest rc=$?"; tail -2 $T/pytest-v.log
for x in all-to-all-v all-gather-v reduce-scatter-v; do go u-$x 60 $x -b 16 -e 64M -f 4 --counts uniform; done
mps_on
STOP=560 ck procs8 40 $V3 --procs 8 --mps -d float32
# Where a small variable launch's instructions go (session 24: 5-18x the fixed kernel's):
# per-SASS-instruction counts of all-gather-v at 4 KiB, to be read against `purlin show --source`.
[ $SECONDS -lt 540 ] && { timeout 60 ncu --clock-control none -k regex:purlin_compiled --launch-skip 3 --launch-count 1 \
  --section SourceCounters --page source --print-source sass --csv $P bench all-gather-v -b 4K -e 4K --counts skewed \
  --backend cupy --no-inplace -n 2 -w 1 -G 1 > $T/ncu-sass-agv-4K.csv 2>&1; echo "== ncu sass rc=$?"; }
