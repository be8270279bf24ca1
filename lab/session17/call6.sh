#!/usr/bin/env bash
# Session 17, device call 6 (.snap = HEAD): the Communicator's checks at HEAD, where a small
# all-reduce in processes now defaults to push-parity (D47) with merged copies and batched releases.
source lab/device-prelude.sh
mps_on
use_tree .snap
for n in 8 2; do
  timeout 100 $TR $n tests/gpu/gpu_comm_worker.py --max-bytes 1048576 --replays 20 > $T/comm-worker-p$n.log 2>&1
  echo "rc=$?"; grep -E "comm-check" $T/comm-worker-p$n.log | sort | uniq -c | head -3
done
timeout 100 $TR 8 tests/gpu/gpu_back_to_back_worker.py > $T/b2b-p8.log 2>&1
echo "rc=$?"; grep b2b-check $T/b2b-p8.log | sort | uniq -c | head -4
