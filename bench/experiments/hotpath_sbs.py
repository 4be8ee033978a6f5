"""EXPERIMENT (not run by bench/run.sh): two roifs binaries side by side (bench/notes/hotpath.md).

ROIFS_BASE_BIN (an older build) and ROIFS_BIN (default build/roifs), interleaved; medians of
the read's wall and the daemon's CPU, and its VmHWM. Usage: hotpath_sbs.py small|scale|stream.
small: 4,096 ROIs of 64x64, add 1, blosc lz4 in and out (bench/small_rois.py's data; DASK=k
also times the dask pattern k times); scale: 100,000 ROIs of 32x32, output uncompressed
(bench/scaling.py's largest); stream: PLANES planes of 4096x4096 uint16 in chunks = ROIs of
1x2048x2048, output uncompressed (bench/memory.py's layout, smaller)."""
import os, sys, time, json
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np, zarr
from numcodecs import Blosc
import common as C

BINS = {"base": os.environ["ROIFS_BASE_BIN"], "new": C.ROIFS}
REPS = int(os.environ.get("REPS", 5))
which = sys.argv[1]
D = C.TMP / f"hp_{which}"
C.rmtree(D); D.mkdir(parents=True)

def setup():
    if which == "small":
        N, CH, T = 4096, 1024, 64
        C.random_input(D / "in.zarr", (N, N), (CH, CH), 0)
        rois = C.tiles((N, N), T)
        out = {"compressor": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "shuffle"}
        grid = None
    elif which == "scale":
        T = 32; shape = (250 * T, 400 * T)
        comp = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
        z = zarr.open(str(D / "in.zarr"), mode="w", shape=shape, chunks=(256, 256), dtype="<u2", compressor=comp)
        z[:] = np.random.default_rng(1).integers(0, 1000, shape, dtype="<u2")
        rois = C.tiles(shape, T); out = {}; grid = None
    else:  # stream: planes of 2048x2048 u2, grid ROIs = chunks, output none
        P = int(os.environ.get("PLANES", 16)); shape = (P, 4096, 4096)
        comp = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
        z = zarr.open(str(D / "in.zarr"), mode="w", shape=shape, chunks=(1, 2048, 2048), dtype="<u2", compressor=comp)
        for i in range(P):
            z[i] = np.random.default_rng(i).integers(0, 1000, shape[1:], dtype="<u2")
        rois = None; out = {}; grid = "1,2048,2048"
    if rois is not None:
        C.write_rois(D / "rois.txt", rois)
    cfg = C.write_config(D / "task.ini", {
        "input": {"path": D / "in.zarr"},
        "rois": {"file": D / "rois.txt"} if grid is None else {"grid": grid},
        "process": {"builtin": "add", "param.value": 1},
        "output": out, "cache": {"dir": D / "cache"}})
    return cfg, (len(rois) if rois else None)

cfg, nrois = setup()
def run(binary):
    C.rmtree(D / "cache")
    with C.Mount(cfg, D / "mnt", binary=binary) as m:
        c0 = m.cpu_s(); t0 = time.perf_counter()
        if which == "stream":
            z = zarr.open(str(m.mnt), mode="r")
            for i in range(z.shape[0]):
                z[i]
            nbytes = z.nbytes
        else:
            z = zarr.open(str(m.mnt), mode="r")[:]; nbytes = z.nbytes
        t = time.perf_counter() - t0; cpu = m.cpu_s() - c0
        hwm = int([l for l in open(f"/proc/{m.pid}/status") if l.startswith("VmHWM")][0].split()[1])
    return {"read_s": t, "cpu_s": cpu, "hwm_kib": hwm, "gib": nbytes / 2**30}

res = C.interleaved(REPS, {k: (lambda b=b: run(b)) for k, b in BINS.items()})
out = {"case": which, "rois": nrois, "loadavg": os.getloadavg()}
for k, rs in res.items():
    out[k] = {f: C.median([r[f] for r in rs]) for f in rs[0]}
    out[k]["read_all"] = [round(r["read_s"], 3) for r in rs]
    out[k]["cpu_all"] = [round(r["cpu_s"], 3) for r in rs]
if which == "small" and os.environ.get("DASK"):
    f = lambda x: x + np.uint16(1)
    ts = []
    for i in range(int(os.environ.get("DASK"))):
        C.rmtree(D / "dask.zarr")
        t0 = time.perf_counter(); C.dask_from_delayed(D / "in.zarr", D / "dask.zarr", C.tiles((4096, 4096), 64), f)
        ts.append(time.perf_counter() - t0)
    out["dask_s"] = C.median(ts); out["dask_all"] = ts
out["loadavg_end"] = os.getloadavg()
print(json.dumps(out, indent=1))
C.rmtree(D)
