"""The cost on one host of coordinating hosts through claims (cache layout 4, issue 35): the
small-ROI benchmark (4,096 ROIs of 64x64, bench/small_rois.py's task) and the 100,000-ROI
scaling run (bench/scaling.py's largest task), each a cold mount + full zarr-python read,
with this roifs and with the roifs of commit e5e4ec0 (layout 3: byte-range locks alone, one
shared pack appended to under a lock), side by side; the tasks and runs are
bench/cache_cost.py's.

The baseline binary: $ROIFS_BASELINE_BIN, else commit e5e4ec0 is built in a temporary git
worktree (removed afterwards). Target: within 5 % of the baseline (mount + read)."""
import os

import common as C
from cache_cost import runner, scaling_task, small_task

REPS = int(os.environ.get("REPS", 5))
BASELINE_COMMIT = "e5e4ec0"


def main():
    info = C.machine()
    with C.binary_at(BASELINE_COMMIT, "ROIFS_BASELINE_BIN") as baseline, \
            C.scratch("hosts_cost") as d:
        info["baseline"] = f"{BASELINE_COMMIT} ({C._cmd([baseline, '--version'])})"
        small, big = small_task(d), scaling_task(d)
        cases = {}
        for name, (cfg, cache, exp, n) in (("small", small), ("big", big)):
            for who, b in (("new", C.ROIFS), ("old", baseline)):
                cases[f"{name} | {who}"] = runner(b, cfg, cache, d / "mnt", exp, n, [])
        res = C.interleaved(REPS, cases)

    rows, summary = [], []
    titles = {"small": "4,096 ROIs of 64×64 (small_rois)",
              "big": "100,000 ROIs of 32×32 (scaling)"}
    for name in ("small", "big"):
        new, old = res[f"{name} | new"], res[f"{name} | old"]
        tn, to = C.median([x["total_s"] for x in new]), C.median([x["total_s"] for x in old])
        rn, ro = C.median([x["read_s"] for x in new]), C.median([x["read_s"] for x in old])
        cn, co = C.median([x["cpu_s"] for x in new]), C.median([x["cpu_s"] for x in old])
        rows.append([titles[name], f"{to:.3f}", f"{tn:.3f}", f"{tn / to:.3f}",
                     f"{ro:.3f} / {rn:.3f}", f"{co:.2f} / {cn:.2f}"])
        summary.append({"scenario": f"cost of claims between hosts: {titles[name]}",
                        "roifs": f"{tn:.3f} s mount + read", "alternative":
                        f"roifs {BASELINE_COMMIT} {to:.3f} s", "ratio": f"{tn / to:.3f}",
                        "target": "≤ 1.05", "met": tn / to <= 1.05})
    md = (f"{REPS} repeats, interleaved (each a fresh cache: mount, then `zarr.open(MNT)[:]`); "
          f"medians. Old: roifs of commit {BASELINE_COMMIT} (byte-range locks, one shared "
          "pack). New: this roifs (claims in locks/ created exclusively and renewed, a pack of "
          "its own).\n\n" +
          C.md_table(["task", "old mount+read (s)", "new mount+read (s)", "new / old",
                      "read old / new (s)", "daemon CPU old / new (s)"], rows))
    C.save("hosts_cost", "Cost of claims between hosts", summary, md, {"runs": res}, info)


if __name__ == "__main__":
    main()
