#!/usr/bin/env bash
# Session 24, call 3: call 2's Nsight Compute steps again (a metric name was wrong there).
source lab/device-prelude.sh
R=$PWD; use_tree $R
eval "$(sed -n '/^M=gpu/,/^  echo "== ncu/p' lab/session24/call2.sh)"
sed -n '/^nc agv-even/,/^nc torch/p' lab/session24/call2.sh > /tmp/nc.sh; source /tmp/nc.sh
