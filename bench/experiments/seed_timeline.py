"""EXPERIMENT (not run by bench/run.sh): where the time of one seed case goes.

Mounts the seed case (4-element int64, chunk 4, ROIs [i:i+1], python command sleeping 1 s,
threads = 4), traces the daemon and its children with strace (execve, clock_nanosleep,
exit_group; seccomp-filtered so that other syscalls run untraced), reads the array with
zarr-python and prints, per ROI process, the delays from the start of the read to
/bin/sh's exec, python's exec, the start of the 1-second sleep, and the exit; then the end of
the read.  usage: seed_timeline.py [REPS]
"""
import re
import subprocess
import sys
import time
from pathlib import Path

import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common as C  # noqa: E402
import seed  # noqa: E402


def one(d, cfg, k):
    C.rmtree(d / "cache")
    trace = d / f"trace{k}.txt"
    with C.Mount(cfg, d / "mnt") as m:
        st = subprocess.Popen(["strace", "-f", "--seccomp-bpf", "-ttt", "-e",
                               "trace=execve,clock_nanosleep,exit_group", "-o", str(trace),
                               "-p", str(m.pid)], stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        t0 = time.time()
        zarr.open(str(m.mnt), mode="r")[:]
        t1 = time.time()
        time.sleep(0.2)
        st.terminate()
        st.wait()
    ev = {}
    for line in trace.read_text().splitlines():
        mt = re.match(r"(\d+)\s+([\d.]+)\s+(\w+)\((.*)", line)
        if not mt:
            continue
        pid, ts, call, args = int(mt[1]), float(mt[2]), mt[3], mt[4]
        e = ev.setdefault(pid, {})
        if call == "execve" and "/bin/sh" in args:
            e.setdefault("sh", ts)
        elif call == "execve" and "python3" in args:
            e.setdefault("py", ts)
        elif call == "clock_nanosleep":
            e.setdefault("sleep", ts)
        elif call == "exit_group":
            e.setdefault("exit", ts)
    procs = [e for e in ev.values() if "py" in e or "sh" in e]
    return t0, t1, procs


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with C.scratch("seed_timeline") as d:
        (d / "add2.py").write_text(seed.ADD2)
        zarr.open(str(d / "in.zarr"), mode="w", shape=(4,), chunks=(4,), dtype="<i8",
                  compressor=None)[:] = 0
        C.write_rois(d / "rois.txt", seed.ROI_SETS["[i:i+1] x4"])
        cfg = C.write_config(d / "t.ini", {
            "input": {"path": d / "in.zarr"}, "rois": {"file": d / "rois.txt"},
            "process": {"command": f"{C.PY} {d / 'add2.py'}", "threads": 4},
            "cache": {"dir": d / "cache"}})
        print("ms after the read started: sh exec, python exec, sleep(1) starts, exit; "
              "read done")
        for k in range(reps):
            t0, t1, procs = one(d, cfg, k)
            for e in sorted(procs, key=lambda e: e.get("sh", 0)):
                print("  " + ", ".join(f"{n} {(e[n] - t0) * 1000:7.1f}"
                                       for n in ("sh", "py", "sleep", "exit") if n in e))
            print(f"  read done {(t1 - t0) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
