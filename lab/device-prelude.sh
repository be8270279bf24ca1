# Sourced by lab/session*/call*.sh, run from the repository root on the device: logs
# under $T come back as one tarball ($OUT/logs.tgz, a limit on files returned), the
# wheels in .whl/ (../shared/tools/device-wheels.sh) go to /tmp/site.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T=/tmp/logs; mkdir -p $T
export PYTHONUNBUFFERED=1
# CuPy's kernel cache comes back as $OUT/kcache.tgz (at most 15 MiB); copied to .kcache.tgz
# in the repository root and carried (run's carry: [".whl", ".kcache.tgz"]), the next call
# on a fresh machine skips those builds (session 24's compiled checks spent most of their
# 60-120 s building). CuPy keys entries by source, options, arch and toolkit: a stale one is a miss.
export CUPY_CACHE_DIR=/tmp/kcache; mkdir -p $CUPY_CACHE_DIR
[ -f .kcache.tgz ] && tar -xzf .kcache.tgz -C $CUPY_CACHE_DIR 2>/dev/null
pack_cache() { tar -czf $OUT/kcache.tgz -C $CUPY_CACHE_DIR . 2>/dev/null
  [ "$(stat -c %s $OUT/kcache.tgz 2>/dev/null || echo 0)" -lt $((15 << 20)) ] || rm -f $OUT/kcache.tgz; }
trap 'tar -czf $OUT/logs.tgz -C $T .; pack_cache; echo quit | nvidia-cuda-mps-control 2>/dev/null' EXIT
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
P="python3 -m purlin_bench"
TR="python3 -m torch.distributed.run --standalone --nproc-per-node"

# Start an MPS server: processes on the GPU then run concurrently (the trap stops it).
mps_on() { mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; }

# Run from snapshot $1 (git archive of a commit, carried): cd there, its package first.
use_tree() { cd "$1" && export PYTHONPATH=/tmp/site:$PWD; }

# bench's rows of log $2 as "LABEL size time strategy...; ipc ..." lines, labelled $1.
rows() { grep -E "^ +[0-9]|strategy" "$2" | paste - - | awk '{print "'"$1"'", $1, $6, $0}' \
  | sed -E 's/ +[0-9]+ +[0-9]+ +float.*strategy/ /; s/; floor.*//' | cut -c1-130; }

# check's verdict lines of log $1 (its summary, failures, errors).
summary() { grep -E "passed|fail|error" "$1" | grep -vE "│ +0 │ pass" | tail -3; }

# bench under a timeout of $2 s into $T/$1.log, with the script's options $V after the
# rest of the arguments; prints its rows (rows()), errors and geometric-mean line.
go() {
  local label=$1 t=$2; shift 2
  timeout $t $P bench "$@" $V > $T/$label.log 2>&1; echo "== $label rc=$? t=$SECONDS"; rows "$label" $T/$label.log
  grep -E "rror|geometric" $T/$label.log | cut -c1-150
}

# check under a timeout of $2 s into $T/$1.log from the tree at ${R:-$PWD}, skipped past
# ${STOP:-520} s of the call; prints its verdict lines (summary()).
ck() {
  local label=$1 t=$2; shift 2
  [ $SECONDS -gt ${STOP:-520} ] && { echo "skip $label"; return; }
  ( use_tree ${R:-$PWD}; timeout $t $P check "$@" --backend cupy --failed-only > $T/$label.log 2>&1
    echo "== $label rc=$? t=$SECONDS"; summary $T/$label.log )
}

# The same bench from several trees in turn: each NAME=PATH of the list $3 runs go $1-NAME
# under timeout $2 with the rest of the arguments, from the tree at PATH (a snapshot: git
# archive of a commit, carried untracked), so each tree's rows sit beside the others'.
trees() {
  local label=$1 t=$2 list=$3 nt; shift 3
  for nt in $list; do ( use_tree ${nt#*=}; go $label-${nt%%=*} $t "$@" ); done
}
