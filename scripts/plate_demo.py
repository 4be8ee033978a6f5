"""A small HCS plate end to end (docs/plates.md): writes config/plate/plate.zarr (OME-NGFF 0.4,
wells B/03 and B/04, one image each made by fractal_demo.make_image, B/04 with a second
acquisition as image 1), mounts config/fractal-plate.ini at config/plate/mnt, reads every
image's labels/organoids level 1 and the plate-level table with zarr-python and anndata, checks
each image's labels against the numpy reference of fractal_demo, shows `roifs status` (the
plate map) and unmounts.

    /usr/bin/python3 scripts/plate_demo.py      (after scripts/build.sh)"""
import json
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fractal_demo as F  # noqa: E402

ROOT = F.CONFIG / "plate"
PLATE = ROOT / "plate.zarr"
IMAGES = {"B/03/0": 0, "B/04/0": 0, "B/04/1": 1}  # path in plate: acquisition


def make_plate():
    shutil.rmtree(ROOT, ignore_errors=True)
    g = zarr.open_group(str(PLATE), mode="w")
    g.attrs["plate"] = {"version": "0.4", "name": "demo plate",
                        "rows": [{"name": "B"}], "columns": [{"name": "03"}, {"name": "04"}],
                        "wells": [{"path": "B/03", "rowIndex": 0, "columnIndex": 0},
                                  {"path": "B/04", "rowIndex": 0, "columnIndex": 1}],
                        "acquisitions": [{"id": 0, "name": "cycle 0"},
                                         {"id": 1, "name": "cycle 1"}]}
    levels = {}
    for well in ("B/03", "B/04"):
        g.require_group(well).attrs["well"] = {"version": "0.4", "images": [
            {"path": p.split("/")[2], "acquisition": a} for p, a in IMAGES.items()
            if p.startswith(well)]}
    for p in IMAGES:
        tmp = ROOT / "tmp"
        levels[p] = F.make_image(tmp)
        shutil.move(str(tmp / "image.zarr"), str(PLATE / p))
        shutil.rmtree(tmp)
    return levels


def main():
    levels = make_plate()
    mnt = ROOT / "mnt"
    mnt.mkdir()
    config = F.CONFIG / "fractal-plate.ini"
    F.roifs("mount", config, mnt)
    try:
        t0 = time.perf_counter()
        for p, lv in levels.items():
            got = zarr.open_array(str(mnt / p / "labels/organoids/1"), mode="r")[...]
            want = F.organoids_reference(lv)
            assert np.array_equal(got, want), p
            print(f"{p}: {int(got.max())} organoids, equal to the numpy reference")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import anndata as ad
            t = ad.read_zarr(str(mnt / "tables/organoid_ROI_table"))
        print(f"plate table: {t.n_obs} rows, columns {list(t.obs.columns)}; first rows:")
        print(t.obs.head(3).to_string())
        print(f"read in {time.perf_counter() - t0:.1f} s")
        print(subprocess.run([F.ROIFS, "status", str(mnt)], capture_output=True,
                             text=True).stdout)
        print(json.loads((mnt / "tables/.zattrs").read_text()))
    finally:
        F.roifs("unmount", mnt)


if __name__ == "__main__":
    main()
