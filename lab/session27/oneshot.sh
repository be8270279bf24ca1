#!/usr/bin/env bash
# Session 27: with starts refused again and again, the call that counts most if it is the
# only one: issue 31's record from `.snapboth` (main + flat-early + pooled-occupancy, merged;
# untracked `git archive both`), both distributions (lab/session27/record.sh; every bench row
# checks its outputs), then the branches' graph and process-path exactness while time lasts.
# Carry [".whl", ".kcache.tgz"].
R=$PWD
bash lab/session27/record.sh $R/.snapboth
source lab/device-prelude.sh
V3="all-gather-v,reduce-scatter-v,all-to-all-v --strategy all --counts all"
[ $SECONDS -lt 480 ] && ( use_tree $R/.snapboth; timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_gpu_variable.py -p no:cacheprovider \
  > $T/pytest-v.log 2>&1; echo "== pytest rc=$? t=$SECONDS"; tail -2 $T/pytest-v.log )
mps_on
R=$R/.snapboth STOP=530 ck procs8 60 $V3 --procs 8 --mps -d float32
