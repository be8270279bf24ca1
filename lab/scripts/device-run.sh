#!/usr/bin/env bash
# The device runbook: on the lent GPU machine, install what its image lacks,
# then run the GPU tests, a check matrix and/or benchmarks, logging to $OUT.
#
#   lab/scripts/device-run.sh STEP...      STEP: env warm tests bench-vs-trial survey survey-mid latency check-small check check-compiled bench bench-wide bench-full bench-f32 bench-bf16 tune bench-plan bench-plan-all search procs-smoke tests-core torch-tests procs-check procs-profile procs-stacks procs procs-tune compiled compiled-tests compiled-bench compiled-large compiled-each default-each small-floor gather-gap big-rows fanout fanout-shapes torch-gaps procs-short multi-gpu pack
#
# Prepare here first: ../shared/tools/device-wheels.sh jsonschema jsonschema-specifications
# referencing rpds-py attrs hypothesis sortedcontainers ml_dtypes pytest-timeout
# (puts optuna & co in .whl/; without the extras the test steps fail to collect),
# then call the device tool with carry [".whl"] and this script as the command.
# Every step has its own time limit, so one slow step cannot eat the lease.
set -uo pipefail
OUT=${OUT:-device-logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# Step pack brings back only the plans this call wrote: an archive of all of results/
# put the working tree's older copies over plans an earlier call wrote and had not been
# committed yet (2026-12-04, call 2 undid call 1's all-to-all plan). "This call" is this
# invocation: name pack in the same one as the steps whose plans it should bring back.
CALL_STARTED=$(mktemp)
trap 'rm -f "$CALL_STARTED"' EXIT
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { echo "editable install failed (see install.log); using PYTHONPATH"; export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}; }
PURLIN="python3 -m purlin_bench.cli.main"  # not the console script: where the editable install fails, PYTHONPATH is all there is
# A fresh machine compiles every kernel variant (about a second each) before its
# first timing; carrying the last call's CuPy cache back in (.kcache or .kcache.tgz, packed by
# step pack as kcache.tgz) skips that. CuPy keys entries by source, options,
# architecture and toolkit, so a stale or foreign entry is only a miss.
if [ -d .kcache ] || [ -f .kcache.tgz ]; then
  mkdir -p /tmp/kcache
  [ -d .kcache ] && cp -r .kcache/. /tmp/kcache/ 2>/dev/null
  [ -f .kcache.tgz ] && tar xzf .kcache.tgz -C /tmp/kcache 2>/dev/null
  export CUPY_CACHE_DIR=/tmp/kcache
fi

step_env() {
  { nvidia-smi; nvcc --version | tail -1; python3 -c 'import cupy, numpy; print("cupy", cupy.__version__, "numpy", numpy.__version__); print(cupy.cuda.runtime.getDeviceProperties(0)["name"])'; } 2>&1 | tee "$OUT/env.txt"
}
step_warm() {  # every interpreter variant into CuPy's disk cache, one process per core (lab/scripts/warm_kernels.py)
  timeout ${WARM_LIMIT:-150} python3 lab/scripts/warm_kernels.py 2>&1 | tee "$OUT/warm.log" | tail -5
}
step_tests() {
  timeout ${TESTS_LIMIT:-330} python3 -m pytest -q -p no:cacheprovider -m gpu -o addopts="" --timeout 240 --maxfail 10 -rfE tests/ 2>&1 | tee "$OUT/gpu-tests.log" | tail -40
}
step_survey() {  # datapath variants at chosen sizes beside CuPy and the floor (lab/scripts/datapath_survey.py)
  timeout ${SURVEY_LIMIT:-170} python3 lab/scripts/datapath_survey.py ${SURVEY_SETS:---set large --set small} --json "$OUT/survey.json" 2>&1 | tee "$OUT/survey.log"
}
step_survey-mid() {  # the automatic block count and the copy-engine threshold at mid sizes
  for b in 0 32768 8192; do
    timeout 70 python3 lab/scripts/datapath_survey.py --set mid --auto-block-bytes $b --json "$OUT/mid-$b.json" 2>&1 | tee -a "$OUT/survey-mid.log"
  done
  timeout 70 python3 lab/scripts/datapath_survey.py --set ce --auto-block-bytes 32768 --json "$OUT/ce.json" 2>&1 | tee -a "$OUT/survey-mid.log"
}
step_latency() {  # small sizes: defaults and copy-engine variants beside empty kernels from a graph
  timeout ${LATENCY_LIMIT:-90} python3 lab/scripts/datapath_survey.py --set latency --launch-floor --iters 20 --reps 5 --json "$OUT/latency.json" 2>&1 | tee "$OUT/latency.log"
}
step_bench-vs-trial() {  # issue 13: a bench row and a tune trial of the same configuration and size, in one process
  timeout ${BVT_LIMIT:-150} python3 lab/scripts/bench_vs_trial.py --rounds ${BVT_ROUNDS:-5} --json "$OUT/bench-vs-trial.json" 2>&1 | tee "$OUT/bench-vs-trial.log"
}
step_check-small() {  # every reduction and dtype at counts that take the scalar and the one-vector paths
  for c in all-reduce reduce-scatter reduce; do
    timeout 100 $PURLIN check $c --backend cupy --ranks 3,8 --strategy all --dtype all --op all --count 1,7,1001,4099 --root 0 --failed-only 2>&1 | tee -a "$OUT/check-small.log" | tail -3
  done
}
step_check-compiled() {  # the compiled datapath (the default up to 64 MiB) through the check matrix, its programs built on every core first
  # NVRTC builds each program on first use: one process checked 524 of the 4500 in 200 s, building each (2026-12-03)
  timeout ${CHECK_COMPILED_WARM_LIMIT:-360} python3 lab/scripts/warm_kernels.py --check-compiled 2,3,8 1,1001,16384 float32,bfloat16,int32 2>&1 | tee "$OUT/check-compiled-warm.log" | tail -4
  timeout ${CHECK_COMPILED_LIMIT:-300} $PURLIN check all --backend cupy --kernel compiled --ranks 2,3,8 --strategy all --dtype float32,bfloat16,int32 --count 1,1001,16384 --root all --failed-only 2>&1 | tee "$OUT/check-compiled.log" | tail -6
}
step_check() {
  timeout 300 $PURLIN check all --backend cupy --ranks 1,2,3,4,5,8 --strategy all --dtype float32,float16,bfloat16,int32 --count 1,1001,65536 --root all 2>&1 | tee "$OUT/check.log" | tail -25
}
step_bench() {  # a quick look: every strategy, a coarse size sweep, two collectives
  for c in all-reduce all-gather; do
    timeout 150 $PURLIN bench $c -b 8 -e 256M -f 8 --strategy all --json "$OUT/quick-$c.json" 2>&1 | tee "$OUT/quick-$c.log" | tail -45
  done
}
step_bench-wide() {  # every collective and strategy at a few sizes, float32 and bfloat16
  for d in float32 bfloat16; do
    timeout 200 $PURLIN bench all -b 8 -e 256M -f 32 -d $d --strategy all --json "$OUT/wide-$d.json" 2>&1 | tee "$OUT/wide-$d.log" | grep -E "^#|^[a-z-]+  \(" 
  done
}
step_bench-full() {  # the performance page's sweep: all collectives, 16 B .. 1 GiB (pass the dtype)
  for d in ${DTYPES:-float32 bfloat16}; do
    timeout ${BENCH_LIMIT:-150} $PURLIN bench all -b 16 -e 1G -f 4 -n 10 -w 2 -G 3 -d $d --json "$OUT/bench-$d.json" --plot "$OUT/bench-$d.png" 2>&1 \
      | tee "$OUT/bench-$d.log" | grep -E "^#|^[a-z-]+  \("
  done
}
step_bench-f32() { DTYPES=float32 BENCH_LIMIT=130 step_bench-full; }
step_bench-bf16() { DTYPES=bfloat16 BENCH_LIMIT=150 step_bench-full; }
step_tune() {  # the committed H200 plans: every collective, float32 and bfloat16, sweeps/h200.yaml
  # A cut tune keeps its trials in the study database: carried back in as
  # .tune-h200.db (from the last call's results.tgz), the same command resumes them.
  [ -f .tune-h200.db ] && [ ! -f "$OUT/tune.db" ] && cp .tune-h200.db "$OUT/tune.db"
  for c in ${TUNE_MAIN-all-reduce all-gather reduce-scatter all-to-all}; do
    # 150 s for both dtypes: at 110 s the first collective of a fresh machine (all-reduce,
    # which also builds the baseline kernels) wrote float32 and ran out in bfloat16
    timeout ${TUNE_LIMIT:-150} $PURLIN tune $c --sweep sweeps/h200.yaml --trials 16 --timeout 4 --seed 1 ${TUNE_ARGS:-} \
      --out results --storage "sqlite:///$OUT/tune.db" 2>&1 | tee -a "$OUT/tune.log" | tail -15
  done
  for c in ${TUNE_REST-broadcast reduce gather scatter}; do
    # 62 s and one finals round: on 2026-12-03 two rounds at 44 s ran out of time
    # (the finals time four configurations at every probe of five buckets)
    timeout ${TUNE_REST_LIMIT:-62} $PURLIN tune $c --sweep sweeps/h200.yaml --sizes 8,64K,1M,16M,256M --trials 10 --timeout 2 --seed 1 --confirm 1 \
      --out results --storage "sqlite:///$OUT/tune.db" 2>&1 | tee -a "$OUT/tune.log" | tail -13
  done
}
step_bench-plan() {  # tuned plans against the untuned default, timed side by side in one process
  for d in ${PLAN_DTYPES:-float32 bfloat16}; do
    for c in ${BENCH_PLAN-all-reduce all-gather reduce-scatter all-to-all}; do
      timeout 40 $PURLIN bench $c -b 16 -e 256M -f 16 -n 20 -w 3 -G 5 -d $d --no-inplace --plan auto --baseline cupy,default \
        --json "$OUT/cmp-$c-$d.json" 2>&1 | tee "$OUT/cmp-$c-$d.log" | grep -E "^# (Speed|Avg)|rror" | sed "s/^/$c $d /"
    done
  done
}
step_bench-plan-all() {  # every committed plan against the default, side by side, one process per dtype
  for d in ${PLAN_DTYPES:-float32 bfloat16}; do
    timeout ${PLAN_LIMIT:-130} $PURLIN bench all -b 16 -e 256M -f 16 -n 20 -w 3 -G 5 -d $d --no-inplace --plan auto --baseline default \
      --json "$OUT/cmp-all-$d.json" 2>&1 | tee "$OUT/cmp-all-$d.log" | grep -E "^# (Speed|Avg|Out)|rror|^[a-z-]+  \(" | sed "s/^/$d /"
  done
}
step_search() {  # tuner against exhaustive search on one bucket (docs/tuning.md): quick.yaml's 126 configurations
  timeout 120 $PURLIN tune all-reduce --sweep quick --sizes 1M --dtype float32 --sampler bruteforce --trials 200 --confirm 0 \
    --out /tmp/exhaustive --storage "sqlite:///$OUT/search-bruteforce.db" 2>&1 | tail -4
  for seed in 1 2 3; do
    timeout 40 $PURLIN tune all-reduce --sweep quick --sizes 1M --dtype float32 --sampler tpe --trials 31 --seed $seed --confirm 0 \
      --out /tmp/tpe$seed --storage "sqlite:///$OUT/search-tpe$seed.db" 2>&1 | tail -4
  done
}
step_procs-smoke() {  # issue 14: a first look at ranks in processes on one GPU (CUDA IPC), full output
  timeout 90 $PURLIN check all-reduce --procs 2 --backend cupy --strategy all --dtype float32,bfloat16 --count 1,1001 2>&1 | tee "$OUT/procs-smoke.log" | tail -30
}
step_tests-core() {  # the GPU tests but the multi-process and compiled ones (steps procs-check and compiled-tests run those)
  timeout ${TESTS_LIMIT:-330} python3 -m pytest -q -p no:cacheprovider -m gpu -k "${TESTS_K:-not procs and not compiled}" -o addopts="" --timeout 240 --maxfail 10 -rfE tests/ 2>&1 | tee "$OUT/gpu-tests.log" | tail -30
}
step_torch-tests() {  # the torch baseline against the NumPy reference, every spec (tests/gpu/test_gpu_torch_baseline.py)
  timeout ${TORCH_TESTS_LIMIT:-120} python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 100 -rfE tests/gpu/test_gpu_torch_baseline.py 2>&1 | tee "$OUT/torch-tests.log" | tail -8
}
step_procs-check() {  # issue 14's done-means on one GPU: every collective, strategy, dtype, count and root; PROCS_N processes
  for n in ${PROCS_N:-2 4}; do
    timeout ${PROCS_CHECK_LIMIT:-200} $PURLIN check all --procs $n --backend cupy --strategy all --dtype float32,bfloat16,int32 --count 1,1001,65539 --root all --failed-only 2>&1 | tee "$OUT/procs-check-$n.log" | tail -6
  done
}
step_procs-profile() {  # issue 14: where a check with ranks in processes spends its time: each row's seconds, and cProfile of every rank under torchrun
  local args="check all-reduce --backend cupy --strategy all --dtype float32 --count 1,65539 --json"
  timeout ${PROCS_PROFILE_LIMIT:-80} python3 -m torch.distributed.run --nproc-per-node 2 --no-python \
    bash -c "exec python3 -m cProfile -o \"$OUT/prof-2-\$RANK.pstats\" -m purlin_bench.cli.main $args > \"$OUT/prof-2-\$RANK.json\"" 2>&1 | tail -4
  for n in ${PROCS_PROFILE_N:-4}; do
    ( time timeout ${PROCS_PROFILE_LIMIT:-80} $PURLIN $args --procs $n > "$OUT/rows-$n.json" ) 2>&1 | tail -6
  done
}
step_procs-stacks() {  # issue 14: bench --procs on cupy printed nothing for 90-150 s; every process's Python stack after PROCS_STACKS_S s, then the GPU bench test
  PYTHONFAULTHANDLER=1 python3 -m purlin_bench.cli.main bench all-reduce --procs 2 --backend cupy -b 8 -e 1K -f 16 -n 3 -w 1 -G 1 --baseline nccl,default >"$OUT/procs-stacks.log" 2>&1 &
  local pid=$! i
  for i in $(seq ${PROCS_STACKS_S:-45}); do sleep 1; kill -0 $pid 2>/dev/null || break; done
  if kill -0 $pid 2>/dev/null; then  # SIGABRT: faulthandler prints every thread's stack, in the launcher and in each rank
    pkill -ABRT -P $pid; sleep 2; kill -ABRT $pid 2>/dev/null; sleep 3; kill $pid 2>/dev/null
  fi
  wait $pid; tail -120 "$OUT/procs-stacks.log"
  timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 190 -rfE tests/procs/test_procs.py -k "one_gpu and bench" 2>&1 | tail -8
}
step_procs() {  # issue 14 on one GPU: bench, a killed rank, the torch example under torchrun, purlin under torchrun
  timeout 90 $PURLIN bench all-reduce --procs 2 --backend cupy -b 8 -e 1M -f 8 -n 5 -w 1 -G 3 --baseline nccl,default 2>&1 | tee "$OUT/procs-bench.log" | tail -14
  timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 140 -rfE tests/procs/test_procs.py -k "killing and cupy" 2>&1 | tee "$OUT/procs-kill.log" | tail -5
  if [ -f examples/tp_mlp.py ]; then
    timeout 150 python3 -m torch.distributed.run --nproc-per-node 2 examples/tp_mlp.py --replays 100 2>&1 | tee "$OUT/procs-tp-mlp.log" | tail -6
    timeout 150 python3 -m torch.distributed.run --nproc-per-node 2 examples/tp_mlp.py --replays 100 --dtype float32 2>&1 | tee -a "$OUT/procs-tp-mlp.log" | tail -3
  fi
  timeout 90 python3 -m torch.distributed.run --nproc-per-node 2 -m purlin_bench check all-reduce --backend cupy --strategy all --dtype float32,bfloat16 2>&1 | tee "$OUT/procs-torchrun.log" | tail -3
}
step_procs-tune() {  # issue 14: a tune with ranks in processes on one GPU writes a plan for that layout, then bench reads it back
  rm -rf /tmp/procs-tune  # a warm machine keeps the last call's plan: never bench that one
  timeout ${PROCS_TUNE_LIMIT:-150} $PURLIN tune all-reduce --procs 2 --backend cupy --trials 3 --sizes 1K --confirm 1 --dtype float32 \
    --out /tmp/procs-tune --storage "sqlite:///$OUT/procs-tune.db" 2>&1 | tee "$OUT/procs-tune.log" | tail -12
  local plan; plan=$(find /tmp/procs-tune -name 'all-reduce-*.json' | head -1); echo "plan: $plan" | tee -a "$OUT/procs-tune.log"
  [ -n "$plan" ] && timeout 60 $PURLIN bench all-reduce --procs 2 --backend cupy -b 1K -e 1K -n 5 -w 1 -G 3 --plan "$plan" --baseline default --no-inplace 2>&1 | tee -a "$OUT/procs-tune.log" | tail -8
  cp -r /tmp/procs-tune "$OUT/procs-tune-plans" 2>/dev/null
}
step_compiled() { step_compiled-tests; step_compiled-bench; }
step_compiled-tests() {  # issue 16: the compiled datapath on the GPU, checked like the interpreter
  timeout ${COMPILED_TESTS_LIMIT:-240} python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 200 --maxfail 5 -rfE -k "${COMPILED_TESTS_K:-not nothing}" tests/gpu/test_gpu_compiled.py 2>&1 | tee "$OUT/compiled-tests.log" | tail -12
}
step_compiled-bench() {  # issue 16: the compiled kernel timed beside the default (interpreted), torch and CuPy
  for d in float32 bfloat16; do  # the compiled kernel beside the default (interpreted) and CuPy, in one process
    timeout ${COMPILED_BENCH_LIMIT:-150} $PURLIN bench all -b 8 -e 64K -f 8 -n 20 -w 3 -G 5 -c 1 -d $d --kernel compiled --baseline torch,cupy,default --no-inplace --json "$OUT/compiled-$d.json" 2>&1 | tee "$OUT/compiled-$d.log" | grep -E "^# (Speed|Avg)|rror|^[a-z-]+  \(" | tail -20
  done
}
step_compiled-large() {  # issue 16: 16 B .. 1 GiB, the compiled kernel beside the interpreter and torch (the geometric mean, the 0.95x floor)
  for d in ${DTYPES:-float32}; do
    timeout ${COMPILED_LARGE_LIMIT:-200} $PURLIN bench all -b 16 -e 1G -f 4 -n 10 -w 2 -G 3 -d $d --kernel compiled --baseline torch,default --no-inplace --json "$OUT/compiled-large-$d.json" 2>&1 | tee "$OUT/compiled-large-$d.log" | grep -E "^# (Speed|Avg|build)|rror|^[a-z-]+  \(" | tail -30
  done
}
bench_each() {  # NAME ARGS...: one collective a command (COLLECTIVES), 16 B .. EACH_MAX (1G) by COMPILED_EACH_F (16: the last row 256 MiB), beside torch and the default, each line stamped with the time it came
  local name=$1; shift
  for c in ${COLLECTIVES:-reduce-scatter all-to-all broadcast reduce gather scatter}; do
    timeout ${COMPILED_EACH_LIMIT:-85} $PURLIN bench $c -b 16 -e ${EACH_MAX:-1G} -f ${COMPILED_EACH_F:-16} -n 10 -w 2 -G 3 -d ${DTYPES:-float32} "$@" --baseline torch,default --no-inplace \
      --json "$OUT/$name-$c.json" 2>&1 | while IFS= read -r line || [ -n "$line" ]; do printf '%(%T)T %s\n' -1 "$line"; done | tee "$OUT/$name-$c.log" | grep -E "Speed|rror|strategy" | cut -c1-200
    echo "$c: exit ${PIPESTATUS[0]}" | tee -a "$OUT/$name-$c.log"
  done
}
step_compiled-each() { bench_each compiled-each --kernel compiled; }  # issue 16: the compiled kernel forced at every size
step_default-each() {  # issue 16: the default as it ships (compiled up to 64 MiB a buffer), each dtype of DTYPES_EACH
  # 16 commands: 30 s each by default keeps the step under a call's 600 s, and on
  # 2026-12-03 cut some 256 MiB rows at 24 s; give fewer COLLECTIVES more time.
  for d in ${DTYPES_EACH:-float32 bfloat16}; do
    DTYPES=$d COLLECTIVES=${COLLECTIVES:-all-reduce all-gather reduce-scatter all-to-all broadcast reduce gather scatter} \
      COMPILED_EACH_LIMIT=${COMPILED_EACH_LIMIT:-30} bench_each default-each-$d
  done
}
step_small-floor() {  # issue 16: a 256-byte gather's floor (a memcpy node, bare copy kernels from one and from 8 allocations, 8 parallel memcpy nodes, empty kernels), then purlin's compiled gather and scatter beside torch
  timeout ${SMALL_FLOOR_LIMIT:-40} python3 lab/scripts/datapath_survey.py --launch-floor --iters 20 --reps 7 --baseline torch \
    --case gather:float32:256:push:unroll=4,kernel=compiled,threads=128 --case scatter:float32:256:direct:unroll=4,kernel=compiled,threads=128 2>&1 | tee "$OUT/small-floor.log"
}
step_gather-gap() {  # issue 16: a small gather's time over torch's, in one harness: purlin's, torch's, bare kernels whose 8 parts lie in one allocation (contiguous, 128 B, 4 KiB, 2 MiB apart) or 8, and the bare kernel grown towards purlin's a step at a time
  timeout ${GATHER_GAP_LIMIT:-40} python3 lab/scripts/gather_gap.py --bytes ${GATHER_GAP_BYTES:-256} 2>&1 | tee "$OUT/gather-gap.log"
}
step_big-rows() {  # issue 16: the default's 256 MiB rows alone (BIG_ROWS: collective:dtype ...), beside torch
  for cd in ${BIG_ROWS:-all-reduce:float32 all-gather:float32 all-to-all:float32}; do
    case $cd in *:*) ;; *) echo "big-rows: '$cd' is not COLLECTIVE:DTYPE"; continue ;; esac
    timeout ${BIG_ROWS_LIMIT:-30} $PURLIN bench ${cd%%:*} -b 256M -e 256M -n 10 -w 2 -G 3 -d ${cd##*:} --baseline torch,default --no-inplace \
      --json "$OUT/big-${cd%%:*}-${cd##*:}.json" 2>&1 | tee "$OUT/big-${cd%%:*}-${cd##*:}.log" | grep -E "Speed|rror|strategy" | cut -c1-200
    echo "$cd: exit ${PIPESTATUS[0]}" | tee -a "$OUT/big-${cd%%:*}-${cd##*:}.log"
  done
}
step_fanout() {  # issue 16: why all-gather and broadcast stop at 85-87% of the floor: the write rate (the store hints and the
  # copies' software pipeline, once timed here with kernel_ab.py, were rejected: docs/decisions.md D21, D22)
  timeout 60 python3 lab/scripts/fanout_probe.py 2>&1 | tee "$OUT/fanout-probe.log"
}
step_fanout-shapes() {  # issue 16: bare 1-to-8 broadcast kernels of several shapes beside cudaMemcpyAsync at 256 MiB (which shape reaches the floor)
  timeout ${FANOUT_SHAPES_LIMIT:-90} python3 lab/scripts/fanout_shapes.py --mib ${FANOUT_SHAPES_MIB:-256} 2>&1 | tee "$OUT/fanout-shapes.log"
}
step_torch-gaps() {  # issue 16: where the compiled kernel loses to torch (gather, scatter, the smallest all-to-all), variants beside torch, and empty kernels of the gather's launch shape
  timeout ${TORCH_GAPS_LIMIT:-180} python3 lab/scripts/datapath_survey.py --set torch-gaps --baseline torch --launch-floor --iters 20 --reps 5 --json "$OUT/torch-gaps.json" 2>&1 | tee "$OUT/torch-gaps.log"
}
step_procs-short() {  # issue 14 in four minutes: the torch example, a killed rank on the GPU, the compiled kernel beside the interpreter
  timeout 110 python3 -m torch.distributed.run --nproc-per-node 2 examples/tp_mlp.py --replays 100 2>&1 | tee "$OUT/procs-tp-mlp.log" | tail -8
  timeout 60 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 55 -rfE tests/procs/test_procs.py -k "killing and cupy" 2>&1 | tee "$OUT/procs-kill.log" | tail -5
  timeout 60 $PURLIN bench all-reduce -b 8 -e 64K -f 8 -n 20 -w 3 -G 5 -c 1 --kernel compiled --baseline torch,cupy,default --no-inplace 2>&1 | tee "$OUT/compiled-all-reduce.log" | tail -16
}
step_multi-gpu() {  # issue 6, on an nvidia-h200-x2/x4/x8 machine: check, bench against NCCL, tune, bench the plans
  timeout 240 $PURLIN check all --backend cupy --gpus all --strategy all --dtype float32,bfloat16,int32 --count 1,1001,65539 --root all --failed-only 2>&1 | tee "$OUT/mgpu-check.log" | tail -5
  timeout 300 $PURLIN bench all --gpus all -b 8 -e 1G -f 2 --baseline nccl -c 1 --json "$OUT/mgpu-bench.json" --plot "$OUT/mgpu-bench.png" 2>&1 | tee "$OUT/mgpu-bench.log" | grep -E "^#"
  timeout 600 $PURLIN tune all --gpus all --sweep quick --out results --storage "sqlite:///$OUT/mgpu-tune.db" 2>&1 | tail -20
  timeout 300 $PURLIN bench all --gpus all -b 8 -e 1G -f 4 --baseline nccl --plan auto --json "$OUT/mgpu-plan.json" 2>&1 | grep -E "^#"
}
step_pack() {  # at most 8 files come back: one archive of everything (PACK_TO: write it there, keep $OUT)
  local to=${PACK_TO:-$OUT}
  local written; written=$(find results -type f -newer "$CALL_STARTED" 2>/dev/null)
  tar czf "$to/results.tgz.part" $written "$OUT" /tmp/exhaustive /tmp/tpe* 2>/dev/null; mv "$to/results.tgz.part" "$to/results.tgz"
  local cache=${CUPY_CACHE_DIR:-$HOME/.cupy/kernel_cache}
  if [ -d "$cache" ]; then  # only what comes back: a file of at most 16 MiB
    tar czf "$to/kcache.tgz" -C "$cache" . 2>/dev/null
    local size; size=$(stat -c %s "$to/kcache.tgz" 2>/dev/null || echo 0)
    echo "kernel cache: $(du -sh "$cache" | cut -f1), packed $((size >> 20)) MiB"
    [ "$size" -lt $((15 << 20)) ] || rm -f "$to/kcache.tgz"
  fi
  [ -n "${PACK_TO:-}" ] || find "$OUT" -type f ! -name results.tgz ! -name kcache.tgz ! -name '*.png' -delete
}
for s in "${@:-env tests}"; do
  echo "=== $s"
  "step_$s"
done
