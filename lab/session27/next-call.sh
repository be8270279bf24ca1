#!/usr/bin/env bash
# The next device session's first call. Run from main's tree; carry [".whl", ".kcache.tgz"];
# untracked `.snaprun` = `git archive flat-run-bound` (a reduce-scatter-v run stays flat to
# 4 MiB of windows, where main pools it past 2 MiB: its 1 MiB skewed row, 2.55 MB, ran at
# 0.84x torch pooled). 1. the branch against main, 256 KiB-4 MiB (-f 2), both distributions;
# 2. main's record (lab/session27/record.sh), about 360 s, if the call has time left. Counts
# 100000 at 8 ranks and 250000 at 3 give 3.2 and 3.0 MB of windows: flat on the branch only.
source lab/device-prelude.sh
R=$PWD
V="--backend cupy --no-inplace -n 10 -w 2 -G 3"
for d in skewed uniform; do
  trees run-$d 60 "main=$R run=$R/.snaprun" reduce-scatter-v -b 256K -e 4M -f 2 --counts $d
done
R=$R/.snaprun STOP=200 ck vrun 50 reduce-scatter-v --strategy direct --counts all --ranks 3,8 --count 100000,250000 \
  --kernel compiled -d float32,bfloat16
[ $SECONDS -lt 200 ] && bash lab/session27/record.sh $R
