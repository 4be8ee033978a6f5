"""Label images (docs/labels.md): what ids = unique costs against ids = keep, and stitching
256 FOVs against a plain Python script.

1. keep vs unique: 32 FOVs of 1080x1280 uint16 (one chunk per FOV, blosc lz4), builtin
   label (uint32 output), cold full read with zarr-python, REPS interleaved repeats; target:
   unique within 5% of keep (medians).
2. stitching: one 16x16 plane of 256 FOVs of 1080x1280 (17280x20480 uint16), halo 16,
   ids = unique, stitch = iou 0.5: roifs mounted, every chunk read in C order (the first
   read computes every ROI and the global pass), against a plain Python script doing the same
   over the same labels (scipy.ndimage.label per read region, held in memory, IoU per pair of
   overlapping read regions with numpy, union-find in a dict, relabel and write with
   zarr-python). Measured: wall time, the global pass alone (roifs's log; the script's
   stitching step), peak memory (the daemon's VmHWM; the script's ru_maxrss), and the two
   outputs compared chunk by chunk."""
import os
import resource
import subprocess
import time
import zlib

import numpy as np
import zarr
from numcodecs import Blosc
from scipy import ndimage

import common as C

REPS = int(os.environ.get("REPS", 5))
FOV = (1080, 1280)
GRID = (16, 16)
HALO = 16
VALUE = 33000

SCRIPT = r"""
import resource, sys, time, zlib
import numpy as np, zarr
from scipy import ndimage
IN, OUT, FY, FX, HALO, VALUE, BLOCK, T = sys.argv[1:3] + [int(a) for a in sys.argv[3:8]] + [float(sys.argv[8])]
t0 = time.perf_counter()
z = zarr.open(IN, mode="r")
H, W = z.shape
boxes = [((y, min(y + FY, H)), (x, min(x + FX, W))) for y in range(0, H, FY) for x in range(0, W, FX)]
reads = [[(max(a - HALO, 0), min(b + HALO, s)) for (a, b), s in zip(b, z.shape)] for b in boxes]
labs = []
for rr in reads:  # every FOV's labels, halo included, kept in memory
    lab, n = ndimage.label(z[rr[0][0]:rr[0][1], rr[1][0]:rr[1][1]] > VALUE)
    labs.append(lab.astype(np.uint32))
t1 = time.perf_counter()
parent = {}
def find(x):
    while parent.get(x, x) != x:
        x = parent[x]
    return x
for r in range(len(boxes)):
    for s in range(r + 1, len(boxes)):
        zz = [(max(p[0], q[0]), min(p[1], q[1])) for p, q in zip(reads[r], reads[s])]
        if any(a >= b for a, b in zz):
            continue
        a = labs[r][zz[0][0] - reads[r][0][0]:zz[0][1] - reads[r][0][0], zz[1][0] - reads[r][1][0]:zz[1][1] - reads[r][1][0]].ravel().astype(np.int64)
        b = labs[s][zz[0][0] - reads[s][0][0]:zz[0][1] - reads[s][0][0], zz[1][0] - reads[s][1][0]:zz[1][1] - reads[s][1][0]].ravel().astype(np.int64)
        both = (a > 0) & (b > 0)
        pairs, inter = np.unique(a[both] * (1 << 32) + b[both], return_counts=True)
        ua, ca = np.unique(a[a > 0], return_counts=True)
        ub, cb = np.unique(b[b > 0], return_counts=True)
        sa, sb = dict(zip(ua.tolist(), ca.tolist())), dict(zip(ub.tolist(), cb.tolist()))
        for p, i in zip(pairs.tolist(), inter.tolist()):
            x, y = p >> 32, p & 0xffffffff
            if i / (sa[x] + sb[y] - i) >= T:
                gx, gy = find(r * BLOCK + x), find(s * BLOCK + y)
                if gx != gy:
                    parent[max(gx, gy)] = min(gx, gy)
t2 = time.perf_counter()
keys = np.array(sorted(parent), dtype=np.uint64)
vals = np.array([find(int(k)) for k in keys], dtype=np.uint64)
out = zarr.open(OUT, mode="w", shape=z.shape, chunks=(FY, FX), dtype="<u4", compressor=None)
crc = 0
for r, (box, rr) in enumerate(zip(boxes, reads)):
    inner = labs[r][box[0][0] - rr[0][0]:box[0][1] - rr[0][0], box[1][0] - rr[1][0]:box[1][1] - rr[1][0]].astype(np.uint64)
    g = np.where(inner > 0, r * BLOCK + inner, 0)
    if len(keys):
        i = np.clip(np.searchsorted(keys, g), 0, len(keys) - 1)
        g = np.where(keys[i] == g, vals[i], g)
    out[box[0][0]:box[0][1], box[1][0]:box[1][1]] = g.astype(np.uint32)
t3 = time.perf_counter()
print("times", t1 - t0, t2 - t1, t3 - t2, t3 - t0, "merged", len(parent),
      "maxrss_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def make_field(shape, seed):
    """Blobs of 10 to 60 pixels: smoothed coarse noise, upsampled by 16 (bilinear)."""
    rng = np.random.default_rng(seed)
    coarse = ndimage.gaussian_filter(rng.standard_normal((shape[0] // 16 + 2,
                                                          shape[1] // 16 + 2)), 1.0)
    coarse /= coarse.std()
    f = ndimage.zoom(coarse, 16, order=1)[:shape[0], :shape[1]]
    return np.clip(30000 + 3000 * f, 0, 65535).astype("<u2")


def keep_vs_unique(d, info):
    comp = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
    n = 32
    inp = d / "stack.zarr"
    z = zarr.open(str(inp), mode="w", shape=(n,) + FOV, chunks=(1,) + FOV, dtype="<u2",
                  compressor=comp)
    plane = make_field((4 * FOV[0], 8 * FOV[1]), 1)
    for i in range(n):
        y, x = divmod(i, 8)
        z[i] = plane[y * FOV[0]:(y + 1) * FOV[0], x * FOV[1]:(x + 1) * FOV[1]]
    cfgs = {ids: C.write_config(d / f"{ids}.ini", {
        "input": {"path": inp}, "rois": {"grid": "1,%d,%d" % FOV},
        "process": {"builtin": "label", "param.value": VALUE, "threads": 0},
        "output": {"dtype": "<u4"}, "labels": {"ids": ids},
        "cache": {"dir": d / f"cache-{ids}"}}) for ids in ("keep", "unique")}
    crcs = {}

    def run(ids):
        C.rmtree(d / f"cache-{ids}")
        with C.Mount(cfgs[ids], d / "mnt") as m:
            got, t, cpu = C.read_all(m)
            assert m.status()["calls"] == n
        crcs[ids] = len(np.unique(got))
        return {"read_s": t, "cpu_s": cpu}

    res = C.interleaved(REPS, {ids: (lambda ids=ids: run(ids)) for ids in cfgs})
    med = {ids: C.median([x["read_s"] for x in res[ids]]) for ids in res}
    cpu = {ids: C.median([x["cpu_s"] for x in res[ids]]) for ids in res}
    return med, cpu, res, crcs


def stitch_256(d, info):
    comp = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
    shape = (GRID[0] * FOV[0], GRID[1] * FOV[1])
    inp = d / "plane.zarr"
    z = zarr.open(str(inp), mode="w", shape=shape, chunks=FOV, dtype="<u2", compressor=comp)
    z[...] = make_field(shape, 2)
    log_path = d / "roifs.log"
    cfg = C.write_config(d / "stitch.ini", {
        "input": {"path": inp}, "rois": {"grid": "%d,%d" % FOV, "halo": f"{HALO},{HALO}"},
        "process": {"builtin": "label", "param.value": VALUE, "threads": 0},
        "output": {"dtype": "<u4"},
        "labels": {"ids": "unique", "block": 65536, "stitch": "iou", "stitch_iou": 0.5},
        "mount": {"log": log_path}, "cache": {"dir": d / "cache"}})
    C.rmtree(d / "cache")
    if log_path.exists():
        log_path.unlink()
    crc_roifs = 0
    with C.Mount(cfg, d / "mnt") as m:
        t0 = time.perf_counter()
        out = zarr.open(str(m.mnt), mode="r")
        first = None
        for cy in range(GRID[0]):
            for cx in range(GRID[1]):
                blk = out[cy * FOV[0]:(cy + 1) * FOV[0], cx * FOV[1]:(cx + 1) * FOV[1]]
                crc_roifs = zlib.crc32(blk.tobytes(), crc_roifs)
                if first is None:
                    first = time.perf_counter() - t0
        total = time.perf_counter() - t0
        hwm = C.proc_status_kib(m.pid, "VmHWM")
        calls = m.status()["calls"]
    assert calls == GRID[0] * GRID[1], calls
    line = [x for x in log_path.read_text().splitlines() if "stitching:" in x][-1]
    pass_s = float(line.split("(zones ")[1].split()[0])
    rois_s = float(line.split("after ")[1].split()[0])
    merged = int(line.split("stitching:")[1].split()[0])
    script = d / "stitch.py"
    script.write_text(SCRIPT)
    t0 = time.perf_counter()
    r = subprocess.run([C.PY, str(script), str(inp), str(d / "py.zarr"), str(FOV[0]),
                        str(FOV[1]), str(HALO), str(VALUE), "65536", "0.5"],
                       capture_output=True, text=True, timeout=3600)
    py_wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    f = r.stdout.split()
    py = {"label_s": float(f[1]), "stitch_s": float(f[2]), "relabel_s": float(f[3]),
          "total_s": float(f[4]), "merged": int(f[6]), "maxrss_kib": int(f[8]),
          "wall_s": py_wall}
    pz = zarr.open(str(d / "py.zarr"), mode="r")
    crc_py = 0
    for cy in range(GRID[0]):
        for cx in range(GRID[1]):
            blk = pz[cy * FOV[0]:(cy + 1) * FOV[0], cx * FOV[1]:(cx + 1) * FOV[1]]
            crc_py = zlib.crc32(blk.tobytes(), crc_py)
    roifs = {"first_chunk_s": first, "total_s": total, "pass_s": pass_s, "rois_s": rois_s,
             "merged": merged,
             "vmhwm_kib": hwm, "equal": crc_py == crc_roifs}
    return roifs, py


def main():
    info = C.machine()
    with C.scratch("labels") as d:
        med, cpu, res, nids = keep_vs_unique(d, info)
        roifs, py = stitch_256(d, info)
    ratio = med["unique"] / med["keep"]
    rows = [[f"ids = {ids}", f"{med[ids]:.3f}",
             f"{min(x['read_s'] for x in res[ids]):.3f}–{max(x['read_s'] for x in res[ids]):.3f}",
             f"{cpu[ids]:.2f}", nids[ids]] for ids in ("keep", "unique")]
    md = (f"**keep vs unique.** {REPS} repeats, interleaved; medians. 32 FOVs of 1080×1280 "
          f"uint16 (one chunk each, blosc lz4), builtin label (value {VALUE}), uint32 output, "
          f"cold full read with zarr-python, threads = 0. unique / keep = {ratio:.3f}.\n\n" +
          C.md_table(["ids", "read (s, median)", "range (s)", "daemon CPU (s)",
                      "distinct values read"], rows) +
          f"\n\n**Stitching 256 FOVs.** One plane of 16×16 FOVs of 1080×1280 uint16 "
          f"(17280×20480), halo 16, `ids = unique`, `stitch = iou` 0.5, threads = 0; one run. "
          f"roifs: mounted, every chunk read in C order; the first read computes the 256 ROIs "
          f"and the global pass. Script: the same labels (scipy.ndimage.label per read "
          f"region, all held in memory), IoU per overlapping pair with numpy, union-find in a "
          f"dict, relabel and write with zarr-python. Outputs equal: {roifs['equal']}; "
          f"objects merged: roifs {roifs['merged']}, script {py['merged']}.\n\n" +
          C.md_table(["", "roifs", "Python script"], [
              ["whole job (s)", f"{roifs['total_s']:.1f}", f"{py['total_s']:.1f}"],
              ["first chunk served (s)", f"{roifs['first_chunk_s']:.1f}", "—"],
              ["labelling every FOV (s)", f"{roifs['rois_s']:.1f} (in the first read)",
               f"{py['label_s']:.1f}"],
              ["stitching: IoU over the zones, union-find (s)", f"{roifs['pass_s']:.2f}",
               f"{py['stitch_s']:.2f}"],
              ["relabel and write / serve the rest (s)",
               f"{roifs['total_s'] - roifs['first_chunk_s']:.1f}", f"{py['relabel_s']:.1f}"],
              ["peak memory (MiB)", f"{roifs['vmhwm_kib'] / 1024:.0f} (daemon VmHWM)",
               f"{py['maxrss_kib'] / 1024:.0f} (ru_maxrss)"]]))
    summary = [
        {"scenario": "labels: ids = unique vs keep, 32 FOVs of 1080×1280",
         "roifs": f"{med['unique']:.2f} s", "alternative": f"keep {med['keep']:.2f} s",
         "ratio": f"{ratio:.3f}", "target": "<= 1.05", "met": ratio <= 1.05},
        {"scenario": "labels: stitch = iou, 256 FOVs of 1080×1280, halo 16",
         "roifs": f"{roifs['total_s']:.1f} s, {roifs['vmhwm_kib'] / 1024:.0f} MiB peak",
         "alternative": f"Python script {py['total_s']:.1f} s, "
                        f"{py['maxrss_kib'] / 1024:.0f} MiB peak",
         "ratio": f"{py['total_s'] / roifs['total_s']:.2f}× faster",
         "target": "completes; report", "met": bool(roifs["equal"])}]
    C.save("labels", "Label images: unique ids and stitching", summary, md,
           {"keep_vs_unique": res, "stitch_roifs": roifs, "stitch_script": py}, info)


if __name__ == "__main__":
    main()
