"""The seed scenario as a user writes it: f = `time.sleep(1); return x + 2` in a Python file
that imports numpy, over a 4-element int64 array (chunks 1, 2, 4; ROI sets [i:i+1] x4 and
[i:i+2] x3), threads = 4, read with zarr-python z[:] through a fresh mount (empty cache).

roifs, side by side: `python = seed.py:f` (interpreters forked by a fork server that imported
the file at mount), `worker = python3 seed_worker.py` (a script around roifs.worker.run,
interpreters started at the first read), `command = python3 seed_command.py` (one
interpreter per ROI). Alternative: dask from_delayed + setitem + to_zarr (bench/seed.py).
Reported: the read time per case (the mount is timed apart), medians of interleaved runs.
Target (issue 18): python <= 1.10 s per case."""
import os

import common as C
from seed import dask_case, roifs_case, seed_cases, seed_config

REPS = int(os.environ.get("REPS", 5))
TARGET = 1.10

FUNC = """\
import time
import numpy as np

def f(block, roi):
    time.sleep(1)
    return block + np.int64(2)
"""
WORKER = FUNC + """
from roifs.worker import run
run(f)
"""
COMMAND = """\
import os, sys, time
import numpy as np
time.sleep(1)
a = np.frombuffer(sys.stdin.buffer.read(), "<i8")
sys.stdout.buffer.write((a + 2).tobytes())
"""
KINDS = {"python": {"python": "seed.py:f"},
         "worker": {"worker": f"{C.PY} seed_worker.py"},
         "command": {"command": f"{C.PY} seed_command.py"}}


def main():
    info = C.machine()
    os.environ.setdefault("ROIFS_PYTHONPATH", str(C.REPO / "python"))
    with C.scratch("seed_numpy") as d:
        (d / "seed.py").write_text(FUNC)
        (d / "seed_worker.py").write_text(WORKER)
        (d / "seed_command.py").write_text(COMMAND)
        cases, keys = {}, []
        for key, tag, inp, rois in seed_cases(d):
            keys.append(key)
            for kind, proc in KINDS.items():
                name = f"{tag}-{kind}"
                cfg = seed_config(d, inp, tag, name, proc, d / f"cache{name}")
                cases[f"{key} | {kind}"] = roifs_case(cfg, d / f"cache{name}", d / f"mnt{name}",
                                                      len(rois))
            run = dask_case(d, inp, rois, tag)
            cases[f"{key} | dask"] = lambda run=run: {"read_s": run(), "mount_s": 0.0}
        load0 = C.loadavg()
        res = C.interleaved(REPS, cases)
        load1 = C.loadavg()

    kinds = list(KINDS) + ["dask"]
    rows, summary, raw = [], [], {}
    for key in keys:
        med = {k: C.median([x["read_s"] for x in res[f"{key} | {k}"]]) for k in kinds}
        mount = {k: C.median([x["mount_s"] for x in res[f"{key} | {k}"]]) for k in KINDS}
        raw[key] = {k: res[f"{key} | {k}"] for k in kinds}
        rows.append([key] + [f"{med[k]:.3f}" for k in kinds] +
                    [" / ".join(f"{mount[k] * 1000:.0f}" for k in KINDS),
                     "yes" if med["python"] <= TARGET else "**no**"])
        summary.append({"scenario": f"seed with numpy: {key}",
                        "roifs": f"python {med['python']:.3f} s",
                        "alternative": f"worker {med['worker']:.3f} s, command "
                                       f"{med['command']:.3f} s, dask {med['dask']:.3f} s",
                        "ratio": f"{med['dask'] / med['python']:.2f}× (dask / python)",
                        "target": f"≤ {TARGET} s", "met": med["python"] <= TARGET})
    md = (f"{REPS} repeats per case, interleaved (order rotated every repeat); medians of the "
          "read time (`zarr.open(MNT)[:]` on a fresh mount with an empty cache; dask: the whole "
          "script). The mount is timed apart (`roifs mount` until it returns; for `python` it "
          "includes the fork server's import of numpy and the file). Load average "
          f"{' '.join(load0)} at the start, {' '.join(load1)} at the end.\n\n" +
          C.md_table(["case", "python (s)", "worker (s)", "command (s)", "dask (s)",
                      "mount ms (python / worker / command)", f"python ≤ {TARGET} s"], rows))
    print(md)
    C.save("seed_numpy", "Seed scenario with numpy: python, worker, command, dask", summary, md,
           raw, info)


if __name__ == "__main__":
    main()
