"""Summarise the runbook's `search` step (lab/scripts/device-run.sh) from its Optuna SQLite files.

    python3 analyze.py DIR_WITH_search-*.db OUTDIR

Writes OUTDIR/trials.json and OUTDIR/trials-<study>.csv (every trial: state,
time, role, repeat-of, configuration, failure) and prints the summary that
docs/tuning.md quotes (OUTDIR/summary.txt here). Standard library only.
"""
import csv
import glob
import json
import os
import sqlite3
import statistics
import sys

NAMES = ["bruteforce", "tpe1", "tpe2", "tpe3"]


def load(db):
    c = sqlite3.connect(db)
    trials = {}
    for tid, num, state in c.execute("select trial_id, number, state from trials"):
        trials[tid] = dict(number=num, state=state, time_us=None, attrs={})
    for tid, v in c.execute("select trial_id, value from trial_values where objective=0"):
        trials[tid]["time_us"] = v
    for tid, k, v in c.execute("select trial_id, key, value_json from trial_user_attributes"):
        trials[tid]["attrs"][k] = json.loads(v)
    studies = [r[0] for r in c.execute("select study_name from studies")]
    out = []
    for t in sorted(trials.values(), key=lambda t: t["number"]):
        a = t["attrs"]
        out.append(dict(number=t["number"], state=t["state"], time_us=t["time_us"], config=a.get("config"), role=a.get("role"),
                        duplicate_of=a.get("duplicate_of"), failure=a.get("failure"), worker=a.get("worker")))
    return studies, out


def key(c):
    return json.dumps(c, sort_keys=True)


def ok(t):
    return t["state"] == "COMPLETE" and t["time_us"] is not None


def main(src, dst):
    os.makedirs(dst, exist_ok=True)
    res = {}
    for n in NAMES:
        db = (glob.glob(f"{src}/**/search-{n}.db", recursive=True) or [None])[0]
        if db:
            studies, ts = load(db)
            res[n] = dict(study=studies, trials=ts)
            with open(f"{dst}/trials-{n}.csv", "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["number", "state", "time_us", "role", "duplicate_of", "strategy", "plan_params", "exec_params", "failure"])
                for t in ts:
                    c = t["config"] or {}
                    w.writerow([t["number"], t["state"], t["time_us"], t["role"], t["duplicate_of"], c.get("strategy"),
                                json.dumps(c.get("plan_params"), sort_keys=True), json.dumps(c.get("exec_params"), sort_keys=True), t["failure"]])
    with open(f"{dst}/trials.json", "w") as f:
        json.dump(res, f, indent=1)

    bf = res["bruteforce"]["trials"]
    valid = [t for t in bf if ok(t)]
    best = min(valid, key=lambda t: t["time_us"])
    B = best["time_us"]
    vals = sorted(t["time_us"] for t in valid)
    bfm = {key(t["config"]): t["time_us"] for t in valid}
    print(f"study: {res['bruteforce']['study']}")
    print(f"bruteforce: {len(bf)} trials, {len({key(t['config']) for t in bf})} distinct, {len(valid)} valid, {len(bf) - len(valid)} invalid")
    print(f"  best {B:.3f} us (trial {best['number']}): {best['config']}")
    print(f"  median {statistics.median(vals):.2f} us ({statistics.median(vals) / B:.1f}x); within 2%: {sum(v <= 1.02 * B for v in vals)}, within 5%: {sum(v <= 1.05 * B for v in vals)}")
    dflt = [t for t in bf if t["role"] == "default"]
    if dflt:
        print(f"  default (trial {dflt[0]['number']}): {dflt[0]['time_us']:.3f} us ({dflt[0]['time_us'] / B:.4f})")
    for n in NAMES[1:]:
        if n not in res:
            continue
        ts = res[n]["trials"]
        good = [t for t in ts if ok(t)]
        b = min(good, key=lambda t: t["time_us"])
        reps = sum(t["duplicate_of"] is not None for t in ts)
        inval = sum(t["state"] == "FAIL" for t in ts)
        first_any = next((i for i, t in enumerate(ts, 1) if ok(t) and t["time_us"] <= 1.02 * B), None)
        first_sampled = next((i for i, t in enumerate(ts, 1) if ok(t) and t["role"] is None and t["duplicate_of"] is None and t["time_us"] <= 1.02 * B), None)
        run, hist = float("inf"), []
        for t in ts:
            if ok(t):
                run = min(run, t["time_us"])
            hist.append(run / B)
        cross = [t["time_us"] / bfm[key(t["config"])] for t in good if t["duplicate_of"] is None and key(t["config"]) in bfm]
        visited = min(bfm[key(t["config"])] for t in good if key(t["config"]) in bfm)
        d0 = ts[0]
        print(f"{n}: {len(ts)} trials ({reps} repeats, {inval} invalid; {len(ts) - reps} measured)")
        print(f"  best {b['time_us']:.3f} us (trial {b['number']}), / exhaustive best {b['time_us'] / B:.4f}: {b['config']}")
        print(f"  trial 0 ({d0['role']}): {d0['time_us']:.3f} us ({d0['time_us'] / B:.4f})")
        print(f"  within 2% of exhaustive best: first at trial {first_any}; first sampled (not the default, not a repeat) at trial {first_sampled}")
        print(f"  running best / exhaustive best after 1, 5, 10, 20, 31 trials: {[round(hist[j - 1], 3) for j in (1, 5, 10, 20, 31) if j <= len(hist)]}")
        print(f"  best configuration visited, by its exhaustive-study time: {visited:.3f} us ({visited / B:.4f})")
        print(f"  same configuration, this study / exhaustive study (different processes): n={len(cross)}, geomean {statistics.geometric_mean(cross):.3f}, {min(cross):.3f}..{max(cross):.3f}")
    fails = {}
    for n, v in res.items():
        for t in v["trials"]:
            if t["state"] == "FAIL":
                fails.setdefault(t["failure"], []).append(n)
    for f, ns in fails.items():
        print(f"invalid x{len(ns)} ({', '.join(sorted(set(ns)))}): {f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
