"""Seed scenario: a 4-element int64 zeros array, chunk sizes 1, 2, 4, ROI sets [i:i+1] (4 ROIs)
and [i:i+2] (3 ROIs), f = sleep 1 s and add 2.

roifs: a /usr/bin/python3 command processor, threads = 4, read with zarr-python z[:] through
a fresh mount with an empty cache.  Alternative: the dask script of the seed discussion,
z[roi] = da.from_delayed(dask.delayed(f)(y[roi]), shape, dtype) for every ROI, then
z.to_zarr(...), default threaded scheduler.  Target: roifs <= 1.1 s per case."""
import time

import numpy as np
import zarr

import common as C

REPS = int(__import__("os").environ.get("REPS", 5))
ADD2 = """\
import array, sys, time
time.sleep(1)
a = array.array("q")
a.frombytes(sys.stdin.buffer.read())
sys.stdout.buffer.write(array.array("q", (x + 2 for x in a)).tobytes())
"""
ROI_SETS = {"[i:i+1] x4": [((i, i + 1),) for i in range(4)],
            "[i:i+2] x3": [((i, i + 2),) for i in range(3)]}
EXPECTED = np.full(4, 2, "<i8")


def f(x):
    time.sleep(1)
    return x + 2


def dask_seed(in_path, out_path, rois):
    C.dask_from_delayed(in_path, out_path, rois, f)


def seed_cases(d):
    """(key, tag, input path, ROIs) of every seed case: each input is written once under d,
    each ROI list to d/rois{tag}.txt."""
    for chunk in (1, 2, 4):
        inp = d / f"in{chunk}.zarr"
        zarr.open(str(inp), mode="w", shape=(4,), chunks=(chunk,), dtype="<i8",
                  compressor=None)[:] = 0
        for rname, rois in ROI_SETS.items():
            tag = f"c{chunk}{len(rois)}"
            C.write_rois(d / f"rois{tag}.txt", rois)
            yield f"chunk {chunk}, {rname}", tag, inp, rois


def seed_config(d, inp, tag, name, process, cache):
    """d/name.ini: the seed task of case tag with the given [process] keys, threads = 4."""
    return C.write_config(d / f"{name}.ini", {
        "input": {"path": inp},
        "rois": {"file": d / f"rois{tag}.txt"},
        "process": {**process, "threads": 4},
        "cache": {"dir": cache}})


def roifs_case(cfg, cache, mnt, n):
    """A case reading the seed task cfg through a fresh mount with an empty cache."""
    def run():
        C.rmtree(cache)
        with C.Mount(cfg, mnt) as m:
            got, t, _ = C.read_all(m)
            calls = m.status()["calls"]
        assert (got == EXPECTED).all() and calls == n, (got, calls)
        return {"read_s": t, "mount_s": m.mount_s}
    return run


def dask_case(d, inp, rois, tag):
    """A case running the dask script; its seconds."""
    def run():
        out = d / f"dask{tag}.zarr"
        C.rmtree(out)
        t = C.timed(lambda: dask_seed(inp, out, rois))
        assert (zarr.open(str(out), mode="r")[:] == EXPECTED).all()
        return t
    return run


def main():
    info = C.machine()
    with C.scratch("seed") as d:
        (d / "add2.py").write_text(ADD2)
        cases = {}
        for key, tag, inp, rois in seed_cases(d):
            cfg = seed_config(d, inp, tag, tag, {"command": f"{C.PY} {d / 'add2.py'}"},
                              d / f"cache{tag}")
            cases[key] = (roifs_case(cfg, d / f"cache{tag}", d / f"mnt{tag}", len(rois)),
                          dask_case(d, inp, rois, tag))

        # Interleave: every repeat runs every case, roifs and dask alternating, order rotated.
        flat = {}
        for key, (r, a) in cases.items():
            flat[key + " | roifs"] = r
            flat[key + " | dask"] = a
        res = C.interleaved(REPS, flat)

    rows, summary, raw = [], [], {}
    for key in cases:
        rr = res[key + " | roifs"]
        read = [x["read_s"] for x in rr]
        mount = [x["mount_s"] for x in rr]
        dk = res[key + " | dask"]
        mr, md = C.median(read), C.median(dk)
        raw[key] = {"roifs_read_s": read, "roifs_mount_s": mount, "dask_s": dk}
        rows.append([key, f"{mr:.3f}", f"{min(read):.3f}–{max(read):.3f}",
                     f"{C.median(mount) * 1000:.0f}", f"{md:.3f}", f"{md / mr:.2f}×",
                     "yes" if mr <= 1.1 else "**no**"])
        summary.append({"scenario": f"seed: {key}", "roifs": f"{mr:.3f} s",
                        "alternative": f"dask {md:.3f} s", "ratio": f"{md / mr:.2f}×",
                        "target": "≤ 1.1 s", "met": mr <= 1.1})
    md = (f"{REPS} repeats per case, interleaved (roifs and dask alternate, order rotated "
          "every repeat); medians. roifs: read time of `zarr.open(MNT)[:]` on a fresh mount "
          "with an empty cache (the mount itself is timed separately); dask: the whole "
          "script (graph build + `to_zarr`).\n\n" +
          C.md_table(["case", "roifs read (s)", "roifs range", "roifs mount (ms)",
                      "dask (s)", "dask / roifs", "≤ 1.1 s"], rows))

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    keys = list(cases)
    x = np.arange(len(keys))
    ax.bar(x - 0.2, [C.median(raw[k]["roifs_read_s"]) for k in keys], 0.4, label="roifs (read)")
    ax.bar(x + 0.2, [C.median(raw[k]["dask_s"]) for k in keys], 0.4, label="dask from_delayed")
    ax.axhline(1.1, color="k", ls="--", lw=0.8, label="target 1.1 s")
    ax.set_xticks(x, [k.replace(", ", "\n") for k in keys], fontsize=8)
    ax.set_ylabel("seconds (median)")
    ax.set_title("Seed scenario: f = sleep 1 s + add 2")
    ax.legend(fontsize=8)
    C.save_figure(fig, "seed")
    C.save("seed", "1. Seed scenario", summary, md, raw, info)


if __name__ == "__main__":
    main()
