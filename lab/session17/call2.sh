#!/usr/bin/env bash
# Session 17, device call 2 (.snap = git archive HEAD), under MPS: the whole
# `pytest -m gpu` (less the 92 s jitter test) at HEAD, the first since session 14's
# 9e18a49 (zero-copy, push-parity, 2e126d4's -v barrier rule, D47's process default
# have not run in it), then the -v compiled kernels 2e126d4 changed, every strategy.
source lab/device-prelude.sh
mps_on
use_tree .snap
( time timeout 420 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout 200 -rfE --durations 10 \
    --deselect tests/gpu/test_gpu_compiled.py::test_jitter_keeps_every_result tests ) > $T/pytest-gpu.log 2>&1
echo "rc=$?"; tail -30 $T/pytest-gpu.log
V=all-gather-v,reduce-scatter-v,all-to-all-v
( time timeout 110 $P check $V --backend cupy --ranks 3,8 --strategy all --count 1001,65536 --kernel compiled ) \
  > $T/check-v-compiled.log 2>&1; echo "rc=$?"; grep -E "fail|error" $T/check-v-compiled.log | head -5
tail -4 $T/check-v-compiled.log
