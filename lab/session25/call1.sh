#!/usr/bin/env bash
# Session 25, call 1: the flat small launch (variable.flat_code, every pooled launch here:
# FLAT_MAX_BYTES huge) against main (.snapprev = git archive 89be8a0), skewed and uniform,
# 16 B-4 MiB; then the flat kernels' exactness (compiled check at 3 and 8 ranks, GPU tests).
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
V3="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all"
for x in all-gather-v reduce-scatter-v; do
  for t in flat main; do ( [ $t = main ] && cd .snapprev; use_tree $PWD; go $t-$x 60 $x -b 16 -e 4M -f 4 --counts skewed ); done
done
ck vflat 100 $V3 --ranks 3,8 --kernel compiled -d float32
timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -p no:cacheprovider > $T/pytest-v.log 2>&1
echo "== pytest rc=$?"; tail -2 $T/pytest-v.log
for x in all-gather-v reduce-scatter-v; do [ $SECONDS -lt 400 ] && go u-flat-$x 40 $x -b 16 -e 4M -f 4 --counts uniform; done
# D50's bound again (one channel from 2.5 MiB of rank input at capacity): after D52 one channel
# lost to eight at skewed 512 KiB-1 MiB S. Named configurations, both distributions.
for c in 1 8; do for d in skewed uniform; do
  [ $SECONDS -lt 420 ] && go a2av-c$c-$d 30 all-to-all-v -b 256K -e 4M -f 2 --counts $d --strategy push --channels $c
done; done
