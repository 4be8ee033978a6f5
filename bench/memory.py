"""Memory: the daemon's peak RSS while a reader streams an 8 GiB output.

Array: 64x8192x8192 uint16 (8 GiB), chunks 1x2048x2048 (8 MiB, 1,024 chunks).  The input is
dense but costs almost no disk: one blosc-lz4 chunk file, hard-linked under all 1,024 chunk
keys (roifs reads and decodes every input chunk, as for a real input).  ROIs: grid 1,2048,2048 (1,024 ROIs), builtin add 1, output
uncompressed (so all 8 GiB pass through the cache and FUSE; the cache needs 8 GiB of disk
and is deleted afterwards).

roifs: zarr-python reads the mount plane by plane (z[i], 128 MiB each) while a thread samples
the daemon's VmRSS every 20 ms; VmHWM from /proc/PID/status at the end.  Alternative: the
seed's dask pattern (from_delayed per ROI, setitem, to_zarr with blosc lz4 so that it does not
write another 8 GiB) in a child process; its peak RSS from GNU time (%M).
The daemon's CPU per GiB streamed is compared, in the same interleaved runs, with the roifs of
commit 959ccbf (before issue 21's hot-path work; $ROIFS_HOTPATH_BASE_BIN if set).
Targets: daemon VmHWM <= 256 MiB; daemon CPU per GiB down by a third against 959ccbf."""
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import zarr
from numcodecs import Blosc

import common as C

REPS = int(os.environ.get("REPS", 2))
DASK_REPS = int(os.environ.get("DASK_REPS", 1))
SHAPE, CHUNKS = (64, 8192, 8192), (1, 2048, 2048)
BASE_COMMIT = "959ccbf"

DASK_SCRIPT = """\
import sys, dask, dask.array as da, numpy as np
from numcodecs import Blosc
sys.setrecursionlimit(100000)
inp, out = sys.argv[1], sys.argv[2]
def f(x):
    return x + np.uint16(1)
y = da.from_zarr(inp)
z = da.zeros(y.shape, dtype=y.dtype, chunks=y.chunks)
c = y.chunksize
for p in range(y.shape[0]):
    for a in range(0, y.shape[1], c[1]):
        for b in range(0, y.shape[2], c[2]):
            sl = (slice(p, p + 1), slice(a, a + c[1]), slice(b, b + c[2]))
            z[sl] = da.from_delayed(dask.delayed(f)(y[sl]), (1, c[1], c[2]), y.dtype)
z.to_zarr(out, overwrite=True, compressor=Blosc(cname="lz4", clevel=5, shuffle=1))
"""


class Sampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop = pid, [], threading.Event()
        self.t0 = time.perf_counter()

    def run(self):
        while not self.stop.is_set():
            try:
                rss = C.proc_status_kib(self.pid, "VmRSS")
            except OSError:
                break
            self.samples.append((time.perf_counter() - self.t0, rss / 1024))
            time.sleep(0.02)


def main():
    info = C.machine()
    need = SHAPE[0] * SHAPE[1] * SHAPE[2] * 2
    free = shutil.disk_usage(str(C.TMP.parent if not C.TMP.exists() else C.TMP)).free
    if free < need * 1.3:
        sys.exit(f"memory.py: needs {need * 1.3 / 2**30:.0f} GiB free under {C.TMP}, "
                 f"has {free / 2**30:.0f}")
    with C.scratch("memory") as d:
        inp = d / "in.zarr"
        z = zarr.open(str(inp), mode="w", shape=SHAPE, chunks=CHUNKS, dtype="<u2",
                      compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE))
        pattern = (np.arange(CHUNKS[1] * CHUNKS[2], dtype=np.uint32) % 1000).astype(
            "<u2").reshape(CHUNKS)
        z[:1, :CHUNKS[1], :CHUNKS[2]] = pattern
        for p in range(SHAPE[0]):
            for a in range(SHAPE[1] // CHUNKS[1]):
                for b in range(SHAPE[2] // CHUNKS[2]):
                    if (p, a, b) != (0, 0, 0):
                        os.link(inp / "0.0.0", inp / f"{p}.{a}.{b}")
        plane0 = np.tile(pattern[0], (SHAPE[1] // CHUNKS[1], SHAPE[2] // CHUNKS[2])) + 1
        cfg = C.write_config(d / "task.ini", {
            "input": {"path": inp},
            "rois": {"grid": ",".join(map(str, CHUNKS))},
            "process": {"builtin": "add", "param.value": 1},
            "output": {"compressor": "none"},
            "cache": {"dir": d / "cache"}})
        (d / "dask_job.py").write_text(DASK_SCRIPT)
        traces = []

        def run_roifs(binary=C.ROIFS):
            C.rmtree(d / "cache")
            with C.Mount(cfg, d / "mnt", binary=binary) as m:
                c0 = m.cpu_s()
                s = Sampler(m.pid)
                s.start()
                t0 = time.perf_counter()
                zz = zarr.open(str(m.mnt), mode="r")
                nbytes = 0
                for i in range(SHAPE[0]):
                    a = zz[i]
                    nbytes += a.nbytes
                    if i % 16 == 0:
                        assert np.array_equal(a, plane0)
                t = time.perf_counter() - t0
                s.stop.set()
                s.join()
                hwm = C.proc_status_kib(m.pid, "VmHWM") / 1024
                cpu = m.cpu_s() - c0
                calls = m.status()["calls"]
            assert calls == SHAPE[0] * 16
            C.rmtree(d / "cache")
            if binary == C.ROIFS:
                traces.append(s.samples)
            return {"hwm_mib": hwm, "read_s": t, "gib": nbytes / 2**30, "cpu_s": cpu}

        def run_dask():
            out = d / "dask.zarr"
            C.rmtree(out)
            r = subprocess.run(["/usr/bin/time", "-f", "%M %e", C.PY, str(d / "dask_job.py"),
                                str(inp), str(out)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(r.stderr[-2000:])
            kib, secs = r.stderr.strip().splitlines()[-1].split()
            C.rmtree(out)
            return {"hwm_mib": int(kib) / 1024, "wall_s": float(secs)}

        with C.binary_at(BASE_COMMIT, "ROIFS_HOTPATH_BASE_BIN") as base:
            info["baseline"] = f"{BASE_COMMIT} ({C._cmd([base, '--version'])})"
            res = C.interleaved(REPS, {"roifs": run_roifs, "base": lambda: run_roifs(base),
                                       "dask": run_dask}, {"dask": DASK_REPS})

    rr, dk, rb = res["roifs"], res["dask"], res["base"]
    hwm = [x["hwm_mib"] for x in rr]
    rd = [x["read_s"] for x in rr]
    gib = rr[0]["gib"]
    dh = [x["hwm_mib"] for x in dk]
    dw = [x["wall_s"] for x in dk]
    mh = C.median(hwm)
    cpg = C.median([x["cpu_s"] / x["gib"] for x in rr])
    bpg = C.median([x["cpu_s"] / x["gib"] for x in rb])
    bh = [x["hwm_mib"] for x in rb]
    raw = {"roifs_hwm_mib": hwm, "roifs_read_s": rd, "dask_hwm_mib": dh, "dask_wall_s": dw,
           "roifs_cpu_s": [x["cpu_s"] for x in rr], "base_cpu_s": [x["cpu_s"] for x in rb],
           "base_hwm_mib": bh, "base_read_s": [x["read_s"] for x in rb]}
    rows = [["roifs daemon (VmHWM)", f"{mh:.0f}", f"{min(hwm):.0f}–{max(hwm):.0f}",
             f"{C.median(rd):.1f} s ({gib / C.median(rd):.2f} GiB/s)", len(hwm)],
            [f"roifs {BASE_COMMIT} daemon (VmHWM)", f"{C.median(bh):.0f}",
             f"{min(bh):.0f}–{max(bh):.0f}",
             f"{C.median(raw['base_read_s']):.1f} s", len(bh)],
            ["dask from_delayed + setitem + to_zarr (max RSS)", f"{C.median(dh):.0f}",
             f"{min(dh):.0f}–{max(dh):.0f}", f"{C.median(dw):.1f} s", len(dh)]]
    md = (f"Interleaved; medians. {gib:.0f} GiB uint16 read plane by plane with zarr-python "
          f"through the mount ({SHAPE[0]}×{SHAPE[1]}×{SHAPE[2]}, chunks "
          f"{'×'.join(map(str, CHUNKS))} = 8 MiB, output uncompressed, cold cache: every "
          f"chunk is computed during the read). Dense input (one blosc chunk file "
          f"hard-linked under every key).\n\n" +
          C.md_table(["process", "peak RSS (MiB)", "range", "time", "runs"], rows) +
          f"\n\nDaemon CPU (user + system) per GiB streamed: {cpg:.2f} s now, {bpg:.2f} s "
          f"with roifs {BASE_COMMIT} (before the hot-path work) in the same runs: "
          f"{cpg / bpg:.2f}×.")
    summary = [{"scenario": f"memory: stream {gib:.0f} GiB", "roifs": f"VmHWM {mh:.0f} MiB",
                "alternative": f"dask max RSS {C.median(dh):.0f} MiB",
                "ratio": f"{C.median(dh) / mh:.1f}× less", "target": "≤ 256 MiB",
                "met": mh <= 256},
               {"scenario": f"memory: stream {gib:.0f} GiB, daemon CPU per GiB",
                "roifs": f"{cpg:.2f} s/GiB", "alternative": f"roifs {BASE_COMMIT} {bpg:.2f} s/GiB",
                "ratio": f"{cpg / bpg:.2f}×", "target": "≤ 0.67× (down by a third)",
                "met": cpg <= bpg * 2 / 3}]

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, tr in enumerate(traces):
        ax.plot([t for t, _ in tr], [r for _, r in tr], lw=1, label=f"roifs daemon, run {i + 1}")
    ax.axhline(256, color="k", ls="--", lw=0.8, label="target 256 MiB")
    ax.axhline(C.median(dh), color="tab:orange", ls=":", lw=1,
               label=f"dask peak {C.median(dh):.0f} MiB")
    ax.set_xlabel("seconds into the 8 GiB read")
    ax.set_ylabel("daemon VmRSS (MiB)")
    ax.set_title("Daemon memory while streaming 8 GiB")
    ax.legend(fontsize=7)
    C.save_figure(fig, "memory")
    C.save("memory", "6. Memory", summary, md, raw, info)


if __name__ == "__main__":
    main()
