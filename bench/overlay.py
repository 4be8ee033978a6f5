"""The OME label overlay (`[output] ome = labels`, docs/mounted-tree.md): a label
image of an OME-Zarr image, every level, as a lazy mount over the image, against writing it
into the image as Fractal's tasks do.

Input: an OME-NGFF 0.4 image of 3 levels (4096x4096, 2048x2048, 1024x1024 uint16, chunks
1024x1024, blosc lz4), bright nuclei on a noisy background. f = builtin label (connected
components of in > VALUE) per FOV of 1024x1024 (ROIs = the level-0 chunks), ids as the
processor returns them; uint32 labels.

roifs: the mount of the overlay, then every level of labels/nuclei read cold with zarr-python
(level 0 computed, levels 1 and 2 nearest neighbour of it); and, apart, the time to the first
level-0 chunk (what a viewer waits for). Alternative: the loop of a Fractal segmentation task:
per FOV read, label, write into IMAGE/labels/nuclei/0 (zarr-python, same compressor), then
the pyramid (each level the one below taken at every second element, nearest neighbour as
roifs presents it; fractal-tasks-core's build_pyramid would take the maximum of each 2x2),
then the label image's metadata and the labels list. The outputs are compared level by level.
The mount's figure includes reading every level; the task's is given with its levels read
back (the comparable figure) and written only. Target: the mount faster than the task with
its read back (ratio < 1)."""
import json
import os
import shutil
import time

import numpy as np
import zarr
from numcodecs import Blosc
from scipy import ndimage

import common as C

REPS = int(os.environ.get("REPS", 5))
N, CH, LEVELS = 4096, 1024, 3
VALUE = 600
COMP = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
AXES = [{"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}]


def datasets():
    return [{"path": str(j), "coordinateTransformations":
             [{"type": "scale", "scale": [0.65 * 2 ** j, 0.65 * 2 ** j]}]} for j in range(LEVELS)]


def make_image(path):
    rng = np.random.default_rng(5)
    img = rng.normal(300, 40, (N, N)).clip(0, 65535).astype("<u2")
    for _ in range(8000):
        y, x = (int(v) for v in rng.integers(6, N - 6, 2))
        img[y - 4:y + 5, x - 4:x + 5] = 1500
    g = zarr.open_group(str(path), mode="w")
    for j in range(LEVELS):
        a = img[::2 ** j, ::2 ** j]
        g.create_dataset(str(j), data=a, chunks=(CH, CH), compressor=COMP)
    g.attrs["multiscales"] = [{"version": "0.4", "name": "image", "axes": AXES,
                               "datasets": datasets()}]
    return img


def reference(img):
    lab = np.zeros(img.shape, "<u4")
    for y in range(0, N, CH):
        for x in range(0, N, CH):
            lab[y:y + CH, x:x + CH] = ndimage.label(img[y:y + CH, x:x + CH] > VALUE)[0]
    return [lab[::2 ** j, ::2 ** j] for j in range(LEVELS)]


def fractal_task(img_path):
    """A Fractal-style segmentation task: labels written into the image, then the pyramid."""
    g = zarr.open_group(str(img_path), mode="a")
    src = g["0"]
    labels = g.require_group("labels")
    lg = labels.create_group("nuclei", overwrite=True)
    out = lg.create_dataset("0", shape=src.shape, chunks=(CH, CH), dtype="<u4",
                            compressor=COMP)
    for y in range(0, N, CH):
        for x in range(0, N, CH):
            out[y:y + CH, x:x + CH] = ndimage.label(src[y:y + CH, x:x + CH] > VALUE)[0]
    for j in range(1, LEVELS):
        below = lg[str(j - 1)][:]
        lg.create_dataset(str(j), data=below[::2, ::2], chunks=(CH, CH), compressor=COMP)
    lg.attrs.update({"multiscales": [{"version": "0.4", "name": "nuclei", "axes": AXES,
                                      "datasets": datasets()}],
                     "image-label": {"version": "0.4", "source": {"image": "../../"}}})
    labels.attrs["labels"] = list(labels.attrs.get("labels", [])) + ["nuclei"]


def main():
    info = C.machine()
    with C.scratch("overlay") as d:
        img = make_image(d / "img.zarr")
        expected = reference(img)
        cfg = C.write_config(d / "nuclei.ini", {
            "input": {"path": d / "img.zarr", "level": 0},
            "rois": {"grid": f"{CH},{CH}"},
            "process": {"builtin": "label", "param.value": VALUE},
            "output": {"ome": "labels", "label_name": "nuclei", "dtype": "<u4"},
            "cache": {"dir": d / "cache"}})
        nrois = (N // CH) ** 2

        def run_roifs():
            C.rmtree(d / "cache")
            with C.Mount(cfg, d / "mnt") as m:
                t0 = time.perf_counter()
                got = [zarr.open(str(m.mnt / "labels" / "nuclei" / str(j)), mode="r")[:]
                       for j in range(LEVELS)]
                t = time.perf_counter() - t0
                calls = m.status()["calls"]
                assert json.loads((m.mnt / "labels" / ".zattrs").read_text())["labels"] == \
                    ["nuclei"]
            assert calls == nrois, calls
            for j in range(LEVELS):
                assert np.array_equal(got[j], expected[j]), j
            return t

        def run_first():
            C.rmtree(d / "cache")
            with C.Mount(cfg, d / "mnt") as m:
                t0 = time.perf_counter()
                z = zarr.open(str(m.mnt / "labels" / "nuclei" / "0"), mode="r")
                first = z[:CH, :CH]
                t = time.perf_counter() - t0
            assert np.array_equal(first, expected[0][:CH, :CH])
            return t

        def run_task():
            work = d / "task.zarr"
            C.rmtree(work)
            shutil.copytree(d / "img.zarr", work)
            t = C.timed(lambda: fractal_task(work))
            t0 = time.perf_counter()  # what the mount's figure includes: every level read
            got = [zarr.open(str(work / "labels" / "nuclei" / str(j)), mode="r")[:]
                   for j in range(LEVELS)]
            back = time.perf_counter() - t0
            for j in range(LEVELS):
                assert np.array_equal(got[j], expected[j]), j
            C.rmtree(work)
            return {"write_s": t, "total_s": t + back}

        res = C.interleaved(REPS, {"roifs": run_roifs, "first": run_first, "task": run_task})

    ro, fi = C.median(res["roifs"]), C.median(res["first"])
    tw = [x["write_s"] for x in res["task"]]
    tt = [x["total_s"] for x in res["task"]]
    tw_m, ta = C.median(tw), C.median(tt)
    rows = [C.time_row("roifs: every level of labels/nuclei read cold through the mount",
                       res["roifs"], f"{ro / ta:.2f}×"),
            C.time_row("roifs: the first level-0 chunk (1024×1024)", res["first"],
                       f"{fi / ta:.2f}×"),
            C.time_row("Fractal-style task: labels written into the image, pyramid, metadata, "
                       "then every level read back (what the mount's figure includes)", tt, "1×"),
            C.time_row("the same task, written only (not read back)", tw, f"{tw_m / ta:.2f}×")]
    md = (f"{REPS} repeats, interleaved; medians. OME-NGFF 0.4 image of {LEVELS} levels "
          f"({N}×{N} to {N >> (LEVELS - 1)}², uint16, chunks {CH}×{CH}, blosc lz4); builtin "
          f"label (in > {VALUE}) per FOV of {CH}×{CH} ({nrois} ROIs); uint32 labels. The "
          f"mount's levels equal the written ones, level by level. Against the task written "
          f"only, the mount takes {ro / tw_m:.2f}×.\n\n" +
          C.md_table(["what", "median (s)", "range (s)", "/ task + read"], rows))
    summary = [{"scenario": f"OME label overlay: {LEVELS} label levels of a {N}² image",
                "roifs": f"{ro:.3f} s (first chunk {fi:.3f} s)",
                "alternative": f"labels written into the image and read back {ta:.3f} s "
                               f"(written only {tw_m:.3f} s)",
                "ratio": f"{ro / ta:.2f}× ({ro / tw_m:.2f}× written only)",
                "target": "< 1× (task + read back)", "met": ro < ta}]
    C.save("overlay", "The OME label overlay against labels written into the image", summary,
           md, {"roifs_s": res["roifs"], "first_s": res["first"], "task_write_s": tw, "task_total_s": tt}, info)


if __name__ == "__main__":
    main()
