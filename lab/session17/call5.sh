#!/usr/bin/env bash
# Session 17, device call 5 (.snap = HEAD): reduce-scatter at 4 and 8 processes, every strategy
# beside ipc (its default, direct, was 1.3-2.9x ipc's time in call 4; push-parity unmeasured there).
source lab/device-prelude.sh
mps_on
use_tree .snap
for n in 8 4; do
  timeout 80 python3 -m purlin_bench bench reduce-scatter --procs $n --backend cupy -b 64 -e 1M -f 8 --no-inplace \
    --strategy all > $T/rs-p$n-all.log 2>&1; echo "rc=$?"; rows "rs p$n" $T/rs-p$n-all.log | grep -v ring
done
