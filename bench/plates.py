"""HCS plates (docs/plates.md): what the plate layer costs, side by side.

Plates of small OME-NGFF 0.4 images (one image per well, 2 levels of 64x64 and 32x32 uint16,
chunks 32x32), `ome = labels` with the builtin label over a 32x32 grid (4 ROIs per image).

1. Mount time of a 384-well plate against a 4-well one (medians of REPS, interleaved).
   Target (issue 33): at most 3x.
2. The daemon's memory (VmRSS) and open files (/proc/PID/fd) after reading every label chunk of
   40 images of the 384-well plate, against 4 images of the 4-well one. Targets: 1.5x and 2x.
   With the default `[mount] images_open = 32`, and again with images_open = 8 (an open image
   holds about 13 descriptors of its cache directories; at most four idle images stay open,
   whatever images_open allows).
3. `roifs warm -j 2` of a 96-well plate (cold cache) against the sum of `roifs warm -j 2` of
   each of its images alone (each a single-image configuration, cold cache). Target: 1.1x.

Run: /usr/bin/python3 bench/plates.py   (REPS=3 by default; WELLS96=96 to shrink case 3)."""
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import zarr

import common as C

REPS = int(os.environ.get("REPS", 3))
WELLS96 = int(os.environ.get("WELLS96", 96))
ROWS = "ABCDEFGHIJKLMNOP"
AXES = [{"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}]


def wells_of(n):
    """n wells of a 384-well layout (16 rows x 24 columns), row by row."""
    return [f"{ROWS[i // 24]}/{i % 24 + 1:02d}" for i in range(n)]


def make_plate(path, nwells):
    rng = np.random.default_rng(3)
    g = zarr.open_group(str(path), mode="w")
    wells = wells_of(nwells)
    rows = sorted({w.split("/")[0] for w in wells})
    cols = sorted({w.split("/")[1] for w in wells})
    g.attrs["plate"] = {"version": "0.4", "name": "bench",
                        "rows": [{"name": r} for r in rows],
                        "columns": [{"name": c} for c in cols],
                        "wells": [{"path": w, "rowIndex": rows.index(w.split("/")[0]),
                                   "columnIndex": cols.index(w.split("/")[1])} for w in wells]}
    for w in wells:
        wg = g.require_group(w)
        wg.attrs["well"] = {"version": "0.4", "images": [{"path": "0"}]}
        img = wg.require_group("0")
        data = rng.integers(0, 1000, (64, 64)).astype("<u2")
        img.create_dataset("0", data=data, chunks=(32, 32))
        img.create_dataset("1", data=data[::2, ::2], chunks=(32, 32))
        img.attrs["multiscales"] = [{"version": "0.4", "axes": AXES, "datasets": [
            {"path": str(j), "coordinateTransformations":
             [{"type": "scale", "scale": [0.5 * 2 ** j] * 2}]} for j in range(2)]}]
    return wells


def config(path, inp, cache, images_open=None):
    Path(path).write_text(
        f"[input]\npath = {inp}\n[rois]\ngrid = 32,32\n[process]\nbuiltin = label\n"
        f"param.value = 600\nthreads = 2\n[output]\nome = labels\ndtype = <u4\n"
        f"label_name = seg\n[cache]\ndir = {cache}\n" +
        (f"[mount]\nimages_open = {images_open}\n" if images_open else ""))
    return path


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_images(mnt, wells):
    for w in wells:
        for c in ("0.0", "0.1", "1.0", "1.1"):
            (mnt / w / "0/labels/seg/0" / c).read_bytes()


def main():
    info = C.machine()
    rows, summary, raw = [], [], {}
    with C.scratch("plates") as d:
        small, big, mid = d / "p4.zarr", d / "p384.zarr", d / "p96.zarr"
        w4, w384, w96 = make_plate(small, 4), make_plate(big, 384), make_plate(mid, WELLS96)
        # 1 and 2: mount time, memory and open files
        mt = {4: [], 384: []}
        mem = {4: [], 384: []}
        nfd = {4: [], 384: []}
        for rep in range(REPS):
            for n, plate, wells, nread in ((4, small, w4, 4), (384, big, w384, 40)):
                cfg = config(d / f"c{n}.ini", plate, d / f"cache{n}-{rep}")
                with C.Mount(cfg, d / f"mnt{n}") as m:
                    mt[n].append(m.mount_s)
                    read_images(m.mnt, wells[:nread])
                    mem[n].append(C.proc_status_kib(m.pid, "VmRSS"))
                    nfd[n].append(fds(m.pid))
        raw.update({"mount_s": mt, "rss_kib": mem, "fds": nfd})
        r_mount = C.median(mt[384]) / C.median(mt[4])
        r_mem = C.median(mem[384]) / C.median(mem[4])
        r_fd = C.median(nfd[384]) / C.median(nfd[4])
        rows += [C.time_row("mount, 4 wells", mt[4], ""),
                 C.time_row("mount, 384 wells", mt[384], f"{r_mount:.2f}x"),
                 ["VmRSS after 4 / 40 images (KiB)", f"{C.median(mem[4]):.0f} / "
                  f"{C.median(mem[384]):.0f}", "", f"{r_mem:.2f}x"],
                 ["open files after 4 / 40 images", f"{C.median(nfd[4]):.0f} / "
                  f"{C.median(nfd[384]):.0f}", "", f"{r_fd:.2f}x"]]
        summary += [{"scenario": "mount 384 vs 4 wells", "roifs": C.median(mt[384]),
                     "alternative": C.median(mt[4]), "ratio": r_mount, "target": 3,
                     "met": r_mount <= 3},
                    {"scenario": "RSS 40 of 384 vs 4 of 4", "roifs": C.median(mem[384]),
                     "alternative": C.median(mem[4]), "ratio": r_mem, "target": 1.5,
                     "met": r_mem <= 1.5},
                    {"scenario": "open files 40 of 384 vs 4 of 4", "roifs": C.median(nfd[384]),
                     "alternative": C.median(nfd[4]), "ratio": r_fd, "target": 2,
                     "met": r_fd <= 2}]
        # 2 again with images_open = 8
        mem8, nfd8 = [], []
        for rep in range(REPS):
            cfg = config(d / "c384-8.ini", big, d / f"cache384-8-{rep}", images_open=8)
            with C.Mount(cfg, d / "mnt384") as m:
                read_images(m.mnt, w384[:40])
                mem8.append(C.proc_status_kib(m.pid, "VmRSS"))
                nfd8.append(fds(m.pid))
        raw.update({"rss_kib_images_open_8": mem8, "fds_images_open_8": nfd8})
        r_mem8 = C.median(mem8) / C.median(mem[4])
        r_fd8 = C.median(nfd8) / C.median(nfd[4])
        rows += [["VmRSS after 4 / 40 images, images_open = 8 (KiB)",
                  f"{C.median(mem[4]):.0f} / {C.median(mem8):.0f}", "", f"{r_mem8:.2f}x"],
                 ["open files after 4 / 40 images, images_open = 8",
                  f"{C.median(nfd[4]):.0f} / {C.median(nfd8):.0f}", "", f"{r_fd8:.2f}x"]]
        summary += [{"scenario": "RSS 40 of 384 (images_open 8) vs 4 of 4",
                     "roifs": C.median(mem8), "alternative": C.median(mem[4]), "ratio": r_mem8,
                     "target": 1.5, "met": r_mem8 <= 1.5},
                    {"scenario": "open files 40 of 384 (images_open 8) vs 4 of 4",
                     "roifs": C.median(nfd8), "alternative": C.median(nfd[4]), "ratio": r_fd8,
                     "target": 2, "met": r_fd8 <= 2}]
        # 3: warm of the plate against the sum of single-image warms
        pw, sw = [], []
        for rep in range(REPS):
            cfg = config(d / "c96.ini", mid, d / f"wcache-{rep}")
            t0 = time.perf_counter()
            subprocess.run([C.ROIFS, "warm", "-j", "2", str(cfg)], check=True,
                           capture_output=True, timeout=3600)
            pw.append(time.perf_counter() - t0)
            total = 0.0
            for w in w96:
                one = config(d / "one.ini", mid / w / "0", d / f"scache-{rep}/{w}")
                t0 = time.perf_counter()
                subprocess.run([C.ROIFS, "warm", "-j", "2", str(one)], check=True,
                               capture_output=True, timeout=600)
                total += time.perf_counter() - t0
            sw.append(total)
        raw.update({"plate_warm_s": pw, "single_warms_s": sw})
        r_warm = C.median(pw) / C.median(sw)
        rows += [C.time_row(f"warm -j 2 of a {WELLS96}-well plate", pw, f"{r_warm:.2f}x"),
                 C.time_row(f"sum of {WELLS96} single-image warms -j 2", sw, "")]
        summary.append({"scenario": f"warm {WELLS96}-well plate vs single warms",
                        "roifs": C.median(pw), "alternative": C.median(sw), "ratio": r_warm,
                        "target": 1.1, "met": r_warm <= 1.1})
    md = C.md_table(["case", "median", "range", "ratio"], rows)
    print(md)
    print(json.dumps(summary, indent=1, default=float))
    C.save("plates", "HCS plates: mount, memory, warm", summary, md, raw, info)


if __name__ == "__main__":
    main()
