#!/usr/bin/env bash
# Session 28's second call (after call1.sh; same snapshots, same carry; about 400 s):
# 1. flat-run-bound (reduce-scatter-v's run flat to 4 MiB of windows) against main at
#    256 KiB-4 MiB, both distributions, and its exactness at 3 and 8 ranks;
# 2. variable_gap.py for all-to-all-v and reduce-scatter-v at 16 and 64 B skewed, from
#    .snapruns (its all-to-all-v rows are then the runs kernel's);
# 3. sources-held (all-gather-v's early loads only where the counts hold an element past a
#    thread's first, early to the flat bound) against main, 16 KiB-1 MiB, both distributions;
# 4. all-to-all-v at 512 KiB-2 MiB skewed on 1, 2, 4 and 8 channels (1 MiB: 0.89x torch on
#    the default's one channel, D50).
# Snapshot for 3: rm -rf .snapheld && mkdir .snapheld && git archive sources-held | tar -x -C .snapheld
source lab/device-prelude.sh
R=$PWD
V="--backend cupy --no-inplace -n 20 -w 5 -G 5"
for d in skewed uniform; do
  trees run-$d 45 "main=$R run=$R/.snaprun" reduce-scatter-v -b 256K -e 4M -f 4 --counts $d
done
STOP=250 R=$R/.snaprun ck run 50 reduce-scatter-v --strategy direct --counts all --ranks 3,8 --count 100000,250000 \
  --kernel compiled -d float32,bfloat16
( use_tree $R/.snapruns; timeout 90 python3 lab/scripts/variable_gap.py --collective all-to-all-v,reduce-scatter-v \
  --bytes 16,64 --counts skewed > $T/gap-a2av.log 2>&1; echo "== gap-a2av rc=$? t=$SECONDS"
  grep -vE "^\s*$" $T/gap-a2av.log | tail -40 )
for d in skewed uniform; do
  [ $SECONDS -lt 420 ] && trees held-$d 40 "main=$R held=$R/.snapheld" all-gather-v -b 16K -e 1M -f 4 --counts $d
done
for c in 1 2 4 8; do
  [ $SECONDS -lt 520 ] && go ch$c 30 all-to-all-v -b 512K -e 2M -f 2 --counts skewed --channels $c
done
