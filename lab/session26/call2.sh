#!/usr/bin/env bash
# The whole GPU suite (355-500 s in sessions 13-14) from the tree at $1 (default: the
# repository root; `.snapearly` for the branch before it merges: its snac.cu change reaches
# every kernel). Carry [".whl", ".kcache.tgz"].
source lab/device-prelude.sh
use_tree ${1:-$PWD}
timeout 560 python3 -m pytest -q -m gpu -p no:cacheprovider > $T/pytest-gpu.log 2>&1
echo "== pytest -m gpu rc=$? t=$SECONDS"; grep -E "passed|failed|FAILED|Error" $T/pytest-gpu.log | tail -8
