#!/usr/bin/env bash
# Session 24, call 2: why a variable kernel with even counts takes 6.4 us where the fixed
# one takes 3.3 (all-gather 512 KiB, call 1): Nsight Compute on both, and on the small
# rows (4 KiB); then var_move out of line (.snapB: one body, not one per op; its kernels
# were 100-125 registers with a stack frame where the fixed ones are 48-62 without) and
# .snapC (that, and all-to-all-v's 64 ops pooled), .snapD (B, and a pooled launch's counts in
# registers, no barrier) against the tree, skewed, 16 B-4 MiB.
source lab/device-prelude.sh
R=$PWD; use_tree $R
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
M=gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,smsp__inst_executed.sum
M=$M,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
nc() { local label=$1 k=$2; shift 2
  timeout 80 ncu --clock-control none -k regex:$k --launch-skip 3 --launch-count 1 --metrics $M "$@" \
    --backend cupy --no-inplace -n 2 -w 1 -G 1 > $T/ncu-$label.log 2>&1
  echo "== ncu $label rc=$?"; grep -E "^ +[a-z_]+__|^ +local|==ERR" $T/ncu-$label.log | sed 's/  */ /g' | head -14; }
for x in all-gather-v reduce-scatter-v all-to-all-v; do
  for t in B A; do ( [ $t = B ] && cd .snapB; use_tree $PWD; go $t-$x 60 $x -b 16 -e 4M -f 4 --counts skewed ); done
done
( cd .snapC && use_tree . && go C-all-to-all-v 60 all-to-all-v -b 16 -e 4M -f 4 --counts skewed )
for x in all-gather-v reduce-scatter-v; do ( cd .snapD && use_tree . && go D-$x 60 $x -b 16 -e 4M -f 4 --counts skewed ); done
nc agv-even-512K purlin_compiled python3 lab/scripts/bench_even_counts.py all-gather-v -b 512K -e 512K
nc ag-512K purlin_compiled $P bench all-gather -b 512K -e 512K
nc agv-skewed-4K purlin_compiled $P bench all-gather-v -b 4K -e 4K --counts skewed
nc ag-4K purlin_compiled $P bench all-gather -b 4K -e 4K
nc torch-agv-4K "index|elementwise|gather" $P bench all-gather-v -b 4K -e 4K --counts skewed
STOP=440 R=$PWD/.snapB ck B-check 60 all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all --ranks 3,8 \
  --kernel compiled -d float32
