#!/usr/bin/env bash
# Session 25, call 17 (as run, on one line): the -v GPU tests and 16-bit types on flat launches.
source lab/device-prelude.sh; R=$PWD; use_tree $R
timeout 100 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -x -p no:cacheprovider > $T/pytest-v.log 2>&1
echo "== pytest rc=$?"; tail -3 $T/pytest-v.log
STOP=150 ck vflat16 70 all-gather-v,reduce-scatter-v --strategy all --counts all --ranks 8 --kernel compiled \
  -d bfloat16,float16
