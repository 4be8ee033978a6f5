"""[measure] (docs/measurements.md): the feature table of every object of a label image against
skimage.measure.regionprops_table over the same label image read from disk (a user's
alternative).

Input: an OME-NGFF 0.4 image of 4 channels, 4096x4096 uint16, chunks 1x1024x1024, blosc lz4:
channel 0 about 20,000 bright squares on a noisy background (segmented), channels 1-3 noise.
Labels: builtin label (connected components of c0 > VALUE) per FOV of 1024x1024, ids = unique;
uint32. Features: area, centroid, bbox, and per channel sum, mean, min, max, std (4 channels).

roifs: (1) "measure": the table's first read on a mount whose labels are already cached (its
records removed): every label chunk read once from the cache and measured against the 4
channels; (2) "cold": a fresh cache, the table's first read (labels computed, then measured);
(3) "record": a remount reading the table from its record (no label chunk read: status
measure.pieces 0, table.from_record 1); (4) "input": the same label image written into the
image as labels/cells, measured by a mount with [measure] labels = cells and no [process]
(a fresh cache: each label chunk copied once from the input's label image and measured as
it is made). Alternative: the label image read from a Zarr copy on
disk and the 4 channels read from the image, then regionprops_table(area, centroid, bbox,
intensity_mean, intensity_min, intensity_max) with the channels last (no sum nor std: skimage
0.19 has none). Values are compared (area, centroids, means, maxima to 1e-9). Target: measure
<= 0.5x the alternative."""
import os
import time
from pathlib import Path

import anndata
import numpy as np
import zarr
from numcodecs import Blosc
from skimage.measure import regionprops_table

import common as C

REPS = int(os.environ.get("REPS", 3))
N, CH, NC = 4096, 1024, 4
VALUE = 600
COMP = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)


def make_image(path):
    rng = np.random.default_rng(11)
    img = rng.normal(300, 40, (NC, N, N)).clip(0, 65535).astype("<u2")
    for y, x in rng.integers(4, N - 8, (21000, 2)):
        img[0, y:y + 5, x:x + 5] = 1500
    g = zarr.open_group(str(path), mode="w")
    g.create_dataset("0", data=img, chunks=(1, CH, CH), compressor=COMP)
    axes = [{"name": "c", "type": "channel"}, {"name": "y", "type": "space"},
            {"name": "x", "type": "space"}]
    g.attrs["multiscales"] = [{"version": "0.4", "name": "image", "axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale",
                                                     "scale": [1.0, 0.65, 0.65]}]}]}]
    return img


def make_segmentation(d):
    """The image (d/img.zarr) and the configuration d/seg.ini (its path) that segments its
    channel 0 with builtin label per FOV and measures every object into the table feat."""
    make_image(d / "img.zarr")
    return C.write_config(d / "seg.ini", {
        "input": {"path": d / "img.zarr", "channel": 0},
        "rois": {"grid": f"{CH},{CH}"},
        "process": {"builtin": "label", "param.value": VALUE},
        "output": {"ome": "labels", "label_name": "nuclei", "dtype": "<u4"},
        "labels": {"ids": "unique", "block": 100000},
        "measure": {"table_name": "feat"},
        "cache": {"dir": d / "cache"}})


def read_table(m):
    ad = anndata.read_zarr(str(m.mnt / "tables" / "feat"))
    return ad.obs.index.astype(np.int64).to_numpy(), list(ad.var.index), np.asarray(ad.X)


def main():
    info = C.machine()
    with C.scratch("measure") as d:
        cfg = make_segmentation(d)
        # the label image on disk for the alternative (and the labels cached for "measure")
        with C.Mount(cfg, d / "mnt") as m:
            lab = zarr.open_array(str(m.mnt / "labels" / "nuclei" / "0"), mode="r")[:]
        zarr.save_array(str(d / "labels.zarr"), lab, chunks=(CH, CH), compressor=COMP)
        nobj = len(np.unique(lab)) - 1
        C.log(f"{nobj} objects")
        # (4): the label image as an existing label image of the input
        img = zarr.open_group(str(d / "img.zarr"), mode="r+")
        lg = img.require_group("labels")
        lg.attrs["labels"] = ["cells"]
        cg = lg.create_group("cells")
        cg.create_dataset("0", data=lab, chunks=(CH, CH), compressor=COMP)
        cg.attrs["multiscales"] = [{"version": "0.4", "name": "cells", "axes": [
            {"name": "y", "type": "space"}, {"name": "x", "type": "space"}], "datasets": [
            {"path": "0", "coordinateTransformations": [{"type": "scale",
                                                         "scale": [0.65, 0.65]}]}]}]
        cg.attrs["image-label"] = {"version": "0.4"}
        cfg_in = C.write_config(d / "meas.ini", {
            "input": {"path": d / "img.zarr"},
            "measure": {"labels": "cells", "table_name": "feat"},
            "cache": {"dir": d / "cache_in"}})
        out = {}

        def drop_records():
            for p in (d / "cache").glob("*.rows"):
                p.unlink()

        def run_measure():
            drop_records()
            with C.Mount(cfg, d / "mnt") as m:
                t0 = time.perf_counter()
                (m.mnt / "tables" / "feat" / "X" / "0.0").read_bytes()
                t = time.perf_counter() - t0
                st = m.status()
                out["roifs"] = read_table(m)
            assert st["calls"] == 0 and st["measure"]["pieces"] == 16, st
            return t

        def run_cold():
            C.rmtree(d / "cache")
            with C.Mount(cfg, d / "mnt") as m:
                t0 = time.perf_counter()
                (m.mnt / "tables" / "feat" / "X" / "0.0").read_bytes()
                t = time.perf_counter() - t0
                assert m.status()["calls"] == 16
            return t

        def run_record():
            with C.Mount(cfg, d / "mnt") as m:
                t0 = time.perf_counter()
                (m.mnt / "tables" / "feat" / "X" / "0.0").read_bytes()
                t = time.perf_counter() - t0
                st = m.status()
            assert st["calls"] == 0 and st["measure"]["pieces"] == 0, st
            assert st["table"]["from_record"] == 1, st
            return t

        def run_input():
            C.rmtree(d / "cache_in")
            with C.Mount(cfg_in, d / "mnt") as m:
                t0 = time.perf_counter()
                (m.mnt / "tables" / "feat" / "X" / "0.0").read_bytes()
                t = time.perf_counter() - t0
                st = m.status()
                out["input"] = read_table(m)
            # each label chunk measured once: as it is made (pieces_made), or at the table's read
            assert st["calls"] == 16, st
            assert st["measure"]["pieces"] + st["measure"]["pieces_made"] == 16, st
            return t

        def run_skimage():
            t0 = time.perf_counter()
            labels = zarr.open_array(str(d / "labels.zarr"), mode="r")[:]
            inten = np.moveaxis(zarr.open_array(str(d / "img.zarr" / "0"), mode="r")[:], 0, -1)
            rp = regionprops_table(labels, intensity_image=inten, properties=[
                "label", "area", "centroid", "bbox", "intensity_mean", "intensity_min",
                "intensity_max"])
            t = time.perf_counter() - t0
            out["skimage"] = rp
            return t

        res = C.interleaved(REPS, {"measure": run_measure, "skimage": run_skimage,
                                   "cold": run_cold, "record": run_record, "input": run_input})
        ids, cols, x = out["roifs"]
        rp = out["skimage"]
        assert np.array_equal(ids, rp["label"])
        assert np.array_equal(out["input"][0], ids) and np.array_equal(out["input"][2], x)
        for ours, theirs in (("area", "area"), ("centroid-y", "centroid-0"),
                             ("centroid-x", "centroid-1"), ("bbox-x-stop", "bbox-3"),
                             ("3-mean", "intensity_mean-3"), ("2-max", "intensity_max-2")):
            np.testing.assert_allclose(x[:, cols.index(ours)], rp[theirs], rtol=1e-9)

    me, sk = C.median(res["measure"]), C.median(res["skimage"])
    co, re_, inp = C.median(res["cold"]), C.median(res["record"]), C.median(res["input"])
    rows = [C.time_row("roifs: the table's first read, labels cached (measuring only)",
                       res["measure"], f"{me / sk:.2f}×"),
            C.time_row("roifs: the table's first read, cold cache (labels computed too)",
                       res["cold"], f"{co / sk:.2f}×"),
            C.time_row("roifs: remount, the table from its record (no label chunk read)",
                       res["record"], f"{re_ / sk:.2f}×"),
            C.time_row("roifs: [measure] labels = cells (the input's label image, no [process])",
                       res["input"], f"{inp / sk:.2f}×"),
            C.time_row("skimage regionprops_table, labels and channels read from disk",
                       res["skimage"], "1×")]
    md = (f"{REPS} repeats, interleaved; medians. {N}×{N}, {NC} channels uint16, chunks "
          f"{CH}×{CH}; {nobj} objects (ids = unique over 16 FOVs); roifs measures area, "
          f"centroid, bbox and per channel sum, mean, min, max, std; skimage area, centroid, "
          f"bbox, intensity mean, min, max. Values compared to 1e-9.\n\n" +
          C.md_table(["what", "median (s)", "range (s)", "/ skimage"], rows))
    summary = [{"scenario": f"feature table of {nobj} objects, {N}² × {NC} channels",
                "roifs": f"{me:.3f} s (labels cached), {co:.3f} s cold, {re_:.3f} s record, "
                         f"{inp:.3f} s the input's label image",
                "alternative": f"regionprops_table from disk {sk:.3f} s",
                "ratio": f"{me / sk:.2f}×", "target": "<= 0.5×", "met": me <= 0.5 * sk}]
    C.save("measure", "Feature tables against regionprops_table", summary, md,
           {"measure_s": res["measure"], "cold_s": res["cold"], "record_s": res["record"],
            "skimage_s": res["skimage"], "input_s": res["input"]}, info)


if __name__ == "__main__":
    main()
