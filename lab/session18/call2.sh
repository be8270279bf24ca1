#!/usr/bin/env bash
# Session 18, device call 2 (.snap = HEAD, D47 on reduce-scatter), under MPS: reduce-scatter
# at 2 processes, direct beside push-parity (unmeasured there); call 1's one failure,
# test_with_datapath_parameters[exec_params2] (copy engines, compiled), with its traceback;
# then the part of `pytest -m gpu` call 1's time limit cut off, and the Communicator's tests.
source lab/device-prelude.sh
mps_on
use_tree .snap
timeout 50 $P bench reduce-scatter --procs 2 --backend cupy -b 64 -e 256K -f 8 --no-inplace \
  --strategy direct,push-parity > $T/rs-p2.log 2>&1; echo "rc=$? t=$SECONDS"; rows "rs p2" $T/rs-p2.log
G=tests/gpu
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout 90 -x -rfE --tb=long \
  "$G/test_gpu_compiled.py::test_with_datapath_parameters" > $T/pytest-ce.log 2>&1
echo "rc=$? t=$SECONDS"; grep -E "^E |Error|passed|failed" $T/pytest-ce.log | head -30
X=$G/test_gpu_executor.py
timeout $((560 - SECONDS)) python3 -m pytest -q -p no:cacheprovider -m gpu --timeout 150 -rfE --tb=short \
  $G/test_gpu_comm_procs.py $G/test_gpu_compiled.py::test_split_launches_keep_the_call_protocol \
  $G/test_gpu_compiled.py::test_a_missing_notify_is_a_watchdog_naming_rank_step_and_flag \
  $G/test_gpu_compiled.py::test_graph_replays_and_compile_time_are_recorded \
  $X::test_split_launches_run_the_multi_gpu_protocol $X::test_graph_replays_stay_correct \
  $X::test_a_runner_keeps_its_buffers_when_a_later_one_needs_them_larger \
  $X::test_missing_notify_times_out_and_names_the_wait $X::test_launch_that_cannot_be_coresident_is_refused \
  $X::test_blocks_are_a_ceiling_set_by_what_the_data_can_use $G/test_gpu_variable.py tests/procs \
  > $T/pytest-rest.log 2>&1; echo "rc=$? t=$SECONDS"; tail -25 $T/pytest-rest.log
