"""Fractal's two-step workflow with two chained mounts (docs/fractal.md): writes a small
synthetic OME-Zarr image (config/fractal/image.zarr, with a FOV_ROI_table), mounts
config/fractal-organoids.ini (organoids at level 1) and config/fractal-nuclei.ini over it
(nuclei at level 0 within each organoid), reads the labels and the tables with zarr-python and
anndata, checks them against numpy/scipy computed here, prints a summary and unmounts.

    /usr/bin/python3 scripts/fractal_demo.py      (after scripts/build.sh)

tests/e2e/test_chain.py uses make_image and the references below on copies of the two
configuration files."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import zarr
from scipy import ndimage

REPO = Path(__file__).resolve().parent.parent
ROIFS = os.environ.get("ROIFS_BIN", str(REPO / "build" / "roifs"))
CONFIG = REPO / "config"

PX0 = 0.65            # micrometres per pixel at level 0
SHAPE0 = (512, 512)   # y, x
CHUNKS = (128, 128)
LEVELS = 3
FOV = 256             # fields of view: 2 x 2 squares of 256 pixels at level 0
# Organoids (centre y, centre x, radius) at level 0, each inside one field of view; the first
# two have overlapping bounding boxes, which only the masks keep apart.
ORGANOIDS = [(70, 80, 45), (150, 150, 50), (80, 380, 55), (380, 120, 60), (350, 350, 40),
             (440, 440, 35)]
ORGANOID_THRESHOLD, NUCLEUS_THRESHOLD = 400, 1500   # param.value of the two configurations
COLUMNS = ["x_micrometer", "y_micrometer", "z_micrometer", "len_x_micrometer",
           "len_y_micrometer", "len_z_micrometer"]


def disk(shape, cy, cx, r):
    yy, xx = np.ogrid[:shape[0], :shape[1]]
    return (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r


def write_roi_table(image, name, boxes, px):
    """image/tables/NAME: a ROI table in Fractal's AnnData form (boxes: level pixels with
    pixel size px), listed in tables/.zattrs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import anndata as ad
        from anndata.experimental import write_elem
    x = np.array([[x0 * px, y0 * px, 0.0, (x1 - x0) * px, (y1 - y0) * px, 1.0]
                  for (y0, y1), (x0, x1) in boxes], dtype=np.float32)
    table = ad.AnnData(X=x)
    table.obs_names = [f"FOV_{i + 1}" for i in range(len(boxes))]
    table.var_names = COLUMNS
    tables = zarr.open_group(str(image), mode="a").require_group("tables")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_elem(tables, name, table)
    tables[name].attrs.update({"fractal_table_version": "1", "type": "roi_table"})
    tables.attrs["tables"] = sorted(set(tables.attrs.get("tables", [])) | {name})


def make_image(root):
    """root/image.zarr: an OME-NGFF 0.4 image (y, x; LEVELS levels, each 2 x 2 means of the
    one before) of organoids (600) holding nuclei (2500, some across an organoid's edge) on a
    noisy background (100), with a FOV_ROI_table of its four fields of view. Returns the
    levels as numpy arrays."""
    rng = np.random.default_rng(2026)
    img = rng.normal(100, 30, SHAPE0)
    for cy, cx, r in ORGANOIDS:
        img[disk(SHAPE0, cy, cx, r)] = 600
    for cy, cx, r in ORGANOIDS:
        for _ in range(6):
            a, d = rng.uniform(0, 2 * np.pi), rng.uniform(0, r - 3)
            img[disk(SHAPE0, cy + d * np.sin(a), cx + d * np.cos(a), 6)] = 2500
    levels = [np.clip(np.rint(img), 0, 65535).astype("<u2")]
    for _ in range(1, LEVELS):
        d = levels[-1].astype(np.float64)
        levels.append(np.rint(d.reshape(d.shape[0] // 2, 2, d.shape[1] // 2, 2)
                              .mean(axis=(1, 3))).astype("<u2"))
    image = Path(root) / "image.zarr"
    group = zarr.open_group(str(image), mode="w")
    for lv, d in enumerate(levels):
        group.create_dataset(str(lv), data=d, chunks=CHUNKS, dimension_separator="/")
    group.attrs["multiscales"] = [{
        "version": "0.4", "name": "synthetic organoids",
        "axes": [{"name": "y", "type": "space", "unit": "micrometer"},
                 {"name": "x", "type": "space", "unit": "micrometer"}],
        "datasets": [{"path": str(lv), "coordinateTransformations": [
            {"type": "scale", "scale": [PX0 * 2 ** lv, PX0 * 2 ** lv]}]}
            for lv in range(LEVELS)]}]
    fovs = [((y, y + FOV), (x, x + FOV)) for y in range(0, SHAPE0[0], FOV)
            for x in range(0, SHAPE0[1], FOV)]
    write_roi_table(image, "FOV_ROI_table", fovs, PX0)
    return levels


def label_boxes(boxes, img, threshold, mask=None):
    """What builtin label with ids = sequential makes of these ROIs
    (docs/configuration.md#builtin-processors, docs/labels.md, docs/masks.md): in each box,
    connected components of img > threshold, numbered on from the ROIs before. mask: None, or
    (label image at img's shape, the label of each box): a masked ROI sees 0 outside its object
    (mask_input = zero) and writes only its object's pixels."""
    out = np.zeros(img.shape, "<u4")
    offset = 0
    for i, box in enumerate(boxes):
        sl = tuple(slice(a, b) for a, b in box)
        mine = np.ones(img[sl].shape, bool) if mask is None else mask[0][sl] == mask[1][i]
        lab, n = ndimage.label(np.where(mine, img[sl], 0) > threshold)
        keep = mine & (lab > 0)
        out[sl][keep] = lab[keep] + offset
        offset += n
    return out


def bounding_boxes(labels):
    """{id: ((y0, y1), (x0, x1))} of every nonzero id, in id order."""
    found = ndimage.find_objects(labels)
    return {i + 1: tuple((s.start, s.stop) for s in sl)
            for i, sl in enumerate(found) if sl is not None}


def organoids_reference(levels):
    """Step 1: labels at level 1, one ROI per field of view."""
    f = FOV // 2
    fovs = [((y, y + f), (x, x + f)) for y in range(0, levels[1].shape[0], f)
            for x in range(0, levels[1].shape[1], f)]
    return label_boxes(fovs, levels[1], ORGANOID_THRESHOLD)


def nuclei_reference(levels, organoids1):
    """Step 2: labels at level 0, one masked ROI per organoid (the table's rows, in id order:
    its bounding box at level 0), the mask being the organoids made level 0 by nearest
    neighbour. Returns (nuclei, that mask)."""
    org0 = organoids1.repeat(2, axis=0).repeat(2, axis=1)
    rows = bounding_boxes(organoids1)
    boxes = [tuple((2 * a, 2 * b) for a, b in box) for box in rows.values()]
    return label_boxes(boxes, levels[0], NUCLEUS_THRESHOLD, (org0, list(rows))), org0


def roifs(*args, timeout=120):
    subprocess.run([ROIFS, *map(str, args)], check=True, timeout=timeout)


def read_results(m2):
    """Everything the second mount presents that the summary needs (read while mounted)."""
    import anndata
    got = {"organoids": zarr.open(str(m2 / "labels" / "organoids" / "1"), mode="r")[...],
           "nuclei": zarr.open(str(m2 / "labels" / "nuclei" / "0"), mode="r")[...],
           "labels": json.loads((m2 / "labels" / ".zattrs").read_text())["labels"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got["table"] = anndata.read_zarr(str(m2 / "tables" / "nuclei_ROI_table"))
    got["status2"] = json.loads((m2 / ".roifs" / "status").read_text())
    return got


def main():
    data = CONFIG / "fractal"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    data.mkdir()
    levels = make_image(data)
    m1, m2 = data / "organoids", data / "nuclei"
    m1.mkdir()
    m2.mkdir()
    roifs("mount", CONFIG / "fractal-organoids.ini", m1)
    try:
        roifs("mount", CONFIG / "fractal-nuclei.ini", m2)
        try:
            got = read_results(m2)
            got["status1"] = json.loads((m1 / ".roifs" / "status").read_text())
        finally:
            roifs("unmount", m2)
    finally:
        roifs("unmount", m1)
    organoids = organoids_reference(levels)
    nuclei, org0 = nuclei_reference(levels, organoids)
    n_org, n_nuc = int(organoids.max()), int(nuclei.max())
    s1, s2 = got["status1"], got["status2"]
    print(f"\nroifs Fractal demo: a {SHAPE0[0]}x{SHAPE0[1]} image, {LEVELS} levels")
    print(f"  step 1: {n_org} organoids at level 1 from 4 fields of view; "
          f"{s1['calls']} processor calls")
    print(f"  step 2: {n_nuc} nuclei at level 0 within them; {s2['calls']} processor calls "
          f"(one per organoid)")
    print(f"  labels/ of the second mount: {got['labels']}; "
          f"tables/nuclei_ROI_table: {got['table'].n_obs} rows")
    checks = {
        "organoids equal numpy/scipy's": np.array_equal(got["organoids"], organoids),
        "nuclei equal numpy/scipy's": np.array_equal(got["nuclei"], nuclei),
        "nuclei only inside organoids": not np.any((got["nuclei"] > 0) & (org0 == 0)),
        "one call per ROI": (s1["calls"], s2["calls"]) == (4, n_org),
        "one table row per nucleus": got["table"].n_obs == n_nuc,
    }
    for what, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
