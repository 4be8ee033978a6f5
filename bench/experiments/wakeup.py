"""EXPERIMENT (not run by bench/run.sh): what one round trip to another process costs on this
machine, depending on what the caller did just before.

A warm read through a FUSE mount pays at least one round trip to the daemon per file opened
(OPEN; Python's open() adds an IOCTL). This measures the latency of a round trip whose
handler does nothing — `statvfs` on a roifs mount, answered from a constant — and, as a
non-FUSE control, a one-byte pipe ping-pong with a child process, each:
- back to back;
- after 100, 300 or 1000 µs of CPU work by the caller (what a reader does between two chunk
  files: it copies a 2 MiB chunk in about 300 µs);
- after 300 µs asleep.
usage: wakeup.py [N]   (N round trips per row, default 2000)
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common as C  # noqa: E402


def busy(us):
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def measure(fn, before, n):
    ts = np.empty(n)
    for i in range(n):
        before()
        t0 = time.perf_counter()
        fn()
        ts[i] = time.perf_counter() - t0
    return np.median(ts) * 1e6, np.percentile(ts, 90) * 1e6


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with C.scratch("wakeup") as d:
        zarr.open(str(d / "in.zarr"), mode="w", shape=(64, 64), chunks=(32, 32),
                  dtype="<u2")[:] = 1
        cfg = C.write_config(d / "t.ini", {"input": {"path": d / "in.zarr"},
                                           "rois": {"grid": "32,32"},
                                           "process": {"builtin": "copy"},
                                           "cache": {"dir": d / "cache"}})
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        child = subprocess.Popen([sys.executable, "-c",
                                  "import os,sys\nr,w=int(sys.argv[1]),int(sys.argv[2])\n"
                                  "while (b:=os.read(r,1)) not in (b'',b'q'):\n"
                                  "    os.write(w,b)", str(r1), str(w2)],
                                 pass_fds=(r1, w2))

        def ping():
            os.write(w1, b"x")
            os.read(r2, 1)

        with C.Mount(cfg, d / "mnt") as m:
            print(f"{'round trip':38s} {'before it':34s} {'median':>9s} {'p90':>9s}")
            for name, fn in (("FUSE statvfs (handler does nothing)", lambda: os.statvfs(m.mnt)),
                             ("pipe ping-pong with a child process", ping)):
                for bname, before in (("nothing (back to back)", lambda: None),
                                      ("100 us of CPU work", lambda: busy(100)),
                                      ("300 us of CPU work", lambda: busy(300)),
                                      ("1000 us of CPU work", lambda: busy(1000)),
                                      ("300 us asleep", lambda: time.sleep(300e-6))):
                    med, p90 = measure(fn, before, n)
                    print(f"{name:38s} {bname:34s} {med:7.1f}us {p90:7.1f}us")
        os.write(w1, b"q")
        child.wait(timeout=10)


if __name__ == "__main__":
    main()
