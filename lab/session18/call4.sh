#!/usr/bin/env bash
# For the next session, after call3.sh, if a hop of ours still costs more than ipc's at 8
# processes: (a) batch length (-n 20 vs 100: host skew absorbed per batch), (b) blocks a
# process: ipc runs 8 blocks of 512, ours 1 of 128 at these sizes. .snap5 = ipc at 1 block
# of 128 threads, .snap6 = ours with the block ceiling uncapped so --blocks 8 holds at 64 B
# (lab patches only, never on main). Session 18 ruled out the cooperative launch (D49) and
# the threads a block.
source lab/device-prelude.sh
mps_on
for n in 5 6; do rm -rf .snap$n; cp -r .snap .snap$n; done
sed -i 's/^BLOCKS, THREADS = 8, 512/BLOCKS, THREADS = 1, 128/' .snap5/purlin_bench/backends/cupy/baselines/ipc.py
sed -i 's/    cap_blocks: bool = True/    cap_blocks: bool = False/' .snap6/purlin_bench/backends/cupy/runtime/settings.py
grep -c "BLOCKS, THREADS = 1, 128" .snap5/purlin_bench/backends/cupy/baselines/ipc.py
grep -c "cap_blocks: bool = False" .snap6/purlin_bench/backends/cupy/runtime/settings.py
B="bench reduce-scatter,all-reduce --procs 8 --backend cupy -b 64 -e 4K -f 8 --no-inplace"
run() { ( use_tree $1 && shift && timeout 60 $P $B "$@" > $T/$LABEL.log 2>&1 ); echo "$LABEL rc=$? t=$SECONDS"
  rows "$LABEL" $T/$LABEL.log; }
LABEL=n20 run .snap -n 20
LABEL=n100 run .snap -n 100
LABEL=ipc1x128 run .snap5
LABEL=ours-b8 run .snap6 --blocks 8 --threads 512
LABEL=ours-b1 run .snap6 --blocks 1
