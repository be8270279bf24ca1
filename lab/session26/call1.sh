#!/usr/bin/env bash
# The next device session's first call (session 26 had none: no machine was lent). Run from
# main's tree; carry [".whl", ".kcache.tgz"]; untracked snapshots in the repository root:
#   .snapearly = `git archive flat-early` (a flat thread loads its first element before the
#                counts: all-gather-v's count-free sources, reduce-scatter-v's run; snac.cu's
#                move_one split into value_one; sm_90 SASS shows the two round trips overlap),
#   .snapprev  = `git archive c7701d0` (main before d82cc5a: the counts' check on thread 0).
# 1. main against the branch, 16 B-1 MiB (the flat range) both distributions, and against
#    c7701d0 (all-gather-v skewed); 2. the branch's exactness: the -v GPU tests, compiled -v
#    at 3 and 8 ranks in float32 and bfloat16, --procs 8 under MPS (value_one is in every kernel).
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
V3="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all"
M="main=$R early=$R/.snapearly"
trees agv-skewed 45 "$M prev=$R/.snapprev" all-gather-v -b 16 -e 1M -f 4 --counts skewed
go fixed-ag 40 all-gather -b 16 -e 1M -f 4  # the floor early all-gather-v aims at: no counts at all
trees rsv-skewed 45 "$M" reduce-scatter-v -b 16 -e 1M -f 4 --counts skewed
trees agv-uniform 45 "$M" all-gather-v -b 16 -e 1M -f 4 --counts uniform
trees rsv-uniform 45 "$M" reduce-scatter-v -b 16 -e 1M -f 4 --counts uniform
( use_tree $R/.snapearly; timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -p no:cacheprovider \
  > $T/pytest-v.log 2>&1; echo "== pytest rc=$? t=$SECONDS"; tail -2 $T/pytest-v.log )
R=$R/.snapearly STOP=440 ck vearly 70 all-gather-v,reduce-scatter-v --strategy all --counts all --ranks 3,8 \
  --kernel compiled -d float32,bfloat16
mps_on
R=$R/.snapearly STOP=520 ck procs8 60 $V3 --procs 8 --mps -d float32
echo quit | nvidia-cuda-mps-control 2>/dev/null
# 3. the flat bound with early loads (D59's 2 MiB was measured without them): the branch
#    against itself with no bound, 1-16 MiB skewed, if the call has time left.
cp -r $R/.snapearly /tmp/early-all && sed -i 's/^FLAT_MAX_BYTES = .*/FLAT_MAX_BYTES = 1 << 40/' \
  /tmp/early-all/purlin_bench/backends/cupy/codegen/flat.py
for x in all-gather-v reduce-scatter-v; do
  [ $SECONDS -lt 500 ] && trees bound-$x 40 "early=$R/.snapearly all=/tmp/early-all" $x -b 1M -e 16M -f 4 --counts skewed
done
