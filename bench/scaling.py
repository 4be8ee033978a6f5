"""Scaling with the number of ROIs: 1,000, 10,000 and 100,000 ROIs of constant size (32x32
tiles of a uint16 array sized to hold exactly that many: 25x40, 100x100, 250x400 tiles;
chunks 256x256, so 64 ROIs per chunk; input blosc lz4, output uncompressed), builtin add.

roifs: mount time (configuration, ROI list parse, ROI index build, cache scan) and a cold full
read with zarr-python; cost per ROI = the daemon's CPU time (mount to end of read) / ROIs,
shown with the reader's wall time / ROIs.  Alternative: the seed's dask pattern
(from_delayed per ROI, setitem, to_zarr) at 1,000 and 10,000 ROIs (100,000 would take many
minutes).  Targets: roifs cost per ROI flat within 1.5x across the range; at 100,000 ROIs
a cold read of <= 12 us of wall per ROI with the default settings (issue 21), shown beside
the same read with `[process] readahead = auto`."""
import os

import numpy as np
import zarr
from numcodecs import Blosc

import common as C
from small_rois import dask_pattern

REPS = int(os.environ.get("REPS", 3))
T, CH = 32, 256
GRIDS = {1000: (25, 40), 10000: (100, 100), 100000: (250, 400)}
DASK_MAX = int(os.environ.get("DASK_MAX", 10000))
# dask's setitem pattern grows superlinearly (about 165 s at 10,000 ROIs here): run it once.
DASK_ONCE = {10000}
# At RA_AT ROIs the read is also measured with `[process] readahead = RA` (the default is
# `threads`): with 64 small ROIs per chunk, two chunks of read-ahead are under a millisecond of
# work, and the compute threads wait for the reader's next open; auto reads further ahead.
RA_AT, RA = 100000, "auto"


def main():
    info = C.machine()
    comp = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
    cases, expect = {}, {}
    with C.scratch("scaling") as d:
        for n, (ty, tx) in GRIDS.items():
            shape = (ty * T, tx * T)
            inp = d / f"in{n}.zarr"
            rng = np.random.default_rng(n)
            data = rng.integers(0, 1000, shape, dtype="<u2")
            zarr.open(str(inp), mode="w", shape=shape, chunks=(CH, CH), dtype="<u2",
                      compressor=comp)[:] = data
            expect[n] = data + 1
            rois = [((y, y + T), (x, x + T)) for y in range(0, shape[0], T)
                    for x in range(0, shape[1], T)]
            assert len(rois) == n
            C.write_rois(d / f"rois{n}.txt", rois)
            cfg = C.write_config(d / f"task{n}.ini", {
                "input": {"path": inp},
                "rois": {"file": d / f"rois{n}.txt"},
                "process": {"builtin": "add", "param.value": 1},
                "cache": {"dir": d / f"cache{n}"}})

            def run_roifs(cfg=cfg, n=n):
                C.rmtree(d / f"cache{n}")
                with C.Mount(cfg, d / f"mnt{n}") as m:
                    got, t, _ = C.read_all(m)
                    calls = m.status()["calls"]
                    rss = C.proc_status_kib(m.pid, "VmHWM")
                    cpu = m.cpu_s()
                assert calls == n and np.array_equal(got, expect[n])
                return {"read_s": t, "mount_s": m.mount_s, "hwm_mib": rss / 1024,
                        "cpu_s": cpu}

            cases[f"{n} roifs"] = run_roifs
            if n == RA_AT:  # the same read with a deeper read-ahead than the default
                cfg_ra = C.write_config(d / f"task{n}_ra.ini", {
                    "input": {"path": inp},
                    "rois": {"file": d / f"rois{n}.txt"},
                    "process": {"builtin": "add", "param.value": 1, "readahead": RA},
                    "cache": {"dir": d / f"cache{n}"}})
                cases[f"{n} roifs readahead {RA}"] = \
                    lambda cfg=cfg_ra, run=run_roifs: run(cfg=cfg)
            if n <= DASK_MAX:
                def run_dask(inp=inp, rois=rois, n=n):
                    out = d / f"dask{n}.zarr"
                    C.rmtree(out)
                    t = C.timed(lambda: dask_pattern(inp, out, rois))
                    assert np.array_equal(zarr.open(str(out), mode="r")[:], expect[n])
                    C.rmtree(out)
                    return t
                cases[f"{n} dask"] = run_dask
        res = C.interleaved(REPS, cases, {f"{n} dask": 1 for n in DASK_ONCE})

    rows, raw, per, cpu_per = [], {}, {}, {}
    for n in GRIDS:
        rr = res[f"{n} roifs"]
        read = [x["read_s"] for x in rr]
        mount = [x["mount_s"] for x in rr]
        hwm = [x["hwm_mib"] for x in rr]
        cpu = [x["cpu_s"] for x in rr]
        mr, mm = C.median(read), C.median(mount)
        per[n] = mr / n * 1e6
        cpu_per[n] = C.median(cpu) / n * 1e6
        dk = res.get(f"{n} dask")
        raw[n] = {"roifs_read_s": read, "roifs_mount_s": mount, "roifs_hwm_mib": hwm,
                  "roifs_cpu_s": cpu, "dask_s": dk}
        rows.append([f"{n:,}", f"{GRIDS[n][0] * T}×{GRIDS[n][1] * T}",
                     f"{mm * 1000:.0f}", f"{mm / n * 1e6:.1f}", f"{mr:.3f}",
                     f"{per[n]:.1f}", f"{cpu_per[n]:.1f}", f"{C.median(hwm):.0f}",
                     (f"{C.median(dk):.2f}" + (" (1 run)" if len(dk) == 1 else ""))
                     if dk else "not run (too slow)",
                     f"{C.median(dk) / n * 1e6:.0f}" if dk else "",
                     f"{C.median(dk) / mr:.0f}×" if dk else ""])
    spread = max(per.values()) / min(per.values())
    cpu_spread = max(cpu_per.values()) / min(cpu_per.values())
    md = (f"{REPS} repeats, interleaved; medians. 32×32 ROIs tiling the array, chunks "
          f"256×256 (64 ROIs per chunk), builtin add, cold read with zarr-python. "
          f"The daemon's CPU time per ROI (all threads, from mount to the end of the read: "
          f"the work roifs does per ROI) varies by **{cpu_spread:.2f}×** across the range "
          f"(target ≤ 1.5×); the reader's wall time per ROI by {spread:.2f}×.\n\n" +
          C.md_table(["ROIs", "array", "mount (ms)", "mount µs/ROI", "read (s)",
                      "read µs/ROI", "daemon CPU µs/ROI", "daemon VmHWM (MiB)", "dask (s)", "dask µs/ROI",
                      "dask / roifs"], rows))
    ra = res.get(f"{RA_AT} roifs readahead {RA}")
    ra_per = None
    if ra:
        ra_read = [x["read_s"] for x in ra]
        ra_cpu = [x["cpu_s"] for x in ra]
        ra_per = C.median(ra_read) / RA_AT * 1e6
        raw[f"{RA_AT} readahead {RA}"] = {"roifs_read_s": ra_read, "roifs_cpu_s": ra_cpu}
        md += (f"\n\nThe same {RA_AT:,} ROIs with `[process] readahead = {RA}` (the default is "
               f"`threads`, here 2), in the same interleaved runs: read "
               f"{C.median(ra_read):.3f} s ({min(ra_read):.3f}–"
               f"{max(ra_read):.3f}), **{ra_per:.1f} µs/ROI** against {per[RA_AT]:.1f} with the "
               f"default; daemon CPU {C.median(ra_cpu) / RA_AT * 1e6:.1f} µs/ROI against "
               f"{cpu_per[RA_AT]:.1f}.")
    summary = [{"scenario": "scaling 1k → 100k ROIs: cost per ROI",
                "roifs": "daemon CPU " + ", ".join(f"{cpu_per[n]:.1f}" for n in GRIDS) +
                " µs/ROI; read " + ", ".join(f"{per[n]:.1f}" for n in GRIDS) + " µs/ROI (mount " +
                ", ".join(f"{C.median(raw[n]['roifs_mount_s']) * 1000:.0f}"
                          for n in GRIDS) + " ms)",
                "alternative": "dask " + ", ".join(
                    f"{C.median(raw[n]['dask_s']) / n * 1e6:.0f}" for n in GRIDS
                    if raw[n]["dask_s"]) + " µs/ROI",
                "ratio": f"spread: daemon CPU {cpu_spread:.2f}×, read {spread:.2f}×",
                "target": "flat within 1.5×",
                "met": cpu_spread <= 1.5},
               {"scenario": f"{RA_AT:,} ROIs of 32×32, builtin add: wall time of the cold read "
                            "per ROI",
                "roifs": f"{per[RA_AT]:.1f} µs/ROI" +
                (f" (readahead = {RA}: {ra_per:.1f} µs/ROI)" if ra_per else ""),
                "alternative": "—", "ratio": "", "target": "≤ 12 µs (issue 21, default settings)",
                "met": per[RA_AT] <= 12}]

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ns = list(GRIDS)
    ax.loglog(ns, [per[n] for n in ns], "o-", label="roifs read, µs/ROI")
    ax.loglog(ns, [cpu_per[n] for n in ns], "d-", label="roifs daemon CPU, µs/ROI")
    ax.loglog(ns, [C.median(raw[n]["roifs_mount_s"]) / n * 1e6 for n in ns], "s-",
              label="roifs mount, µs/ROI")
    dn = [n for n in ns if raw[n]["dask_s"]]
    ax.loglog(dn, [C.median(raw[n]["dask_s"]) / n * 1e6 for n in dn], "^-",
              label="dask from_delayed, µs/ROI")
    ax.set_xlabel("number of ROIs (32×32 each)")
    ax.set_ylabel("µs per ROI (median)")
    ax.set_title("Cost per ROI vs number of ROIs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    C.save_figure(fig, "scaling")
    C.save("scaling", "3. Scaling with the number of ROIs", summary, md, raw, info)


if __name__ == "__main__":
    main()
