"""`[output] ome = labels` (SPEC §11): the mount presents the input OME-Zarr image itself, every
file byte for byte, plus labels/NAME (an OME-NGFF label image, 0.4 for Zarr v2, 0.5 for v3,
as many levels as the parent, level k computed, the others nearest neighbour of it) and the
labels list with NAME added; with table_name, tables/NAME, a masking ROI table of the result
(AnnData or csv) whose first read computes the whole output once and whose rows are then
kept in the cache. Refusals: an input that is not an image group, a float output, a label or
table name the image already has."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr
from scipy import ndimage

from conftest import mounted, run_roifs, write_config
from ngff_check import check_image
from test_ome_ngff import write_v3_array

SPACE_AXES = [{"name": "y", "type": "space", "unit": "micrometer"},
              {"name": "x", "type": "space", "unit": "micrometer"}]
C_AXIS = {"name": "c", "type": "channel"}
GRID = (16, 16)  # the ROIs of level k
THRESHOLD = 600


def level_shapes(base, n):
    return [tuple(-(-s // 2 ** j) for s in base) for j in range(n)]


def make_image(root, version, base=(52, 44), nlevels=3, channels=0, translation=True):
    """An OME-Zarr image (0.4 in Zarr v2, 0.5 in Zarr v3) with nlevels levels of uint16,
    halved in y and x, an existing label "old" and an existing table "FOV_ROI_table"; with
    channels, a c axis first. Returns (image path, [level arrays])."""
    img = root / f"img{version}.zarr"
    rng = np.random.default_rng(7)
    axes = ([C_AXIS] if channels else []) + SPACE_AXES
    lead = (channels,) if channels else ()
    levels, datasets = [], []
    for j, shape in enumerate(level_shapes(base, nlevels)):
        data = rng.integers(0, 1000, lead + shape).astype("<u2")
        levels.append(data)
        sc = ([1.0] if channels else []) + [0.5 * 2 ** j, 0.25 * 2 ** j]
        cts = [{"type": "scale", "scale": sc}]
        if translation:
            cts.append({"type": "translation",
                        "translation": ([0.0] if channels else []) + [3.0, -2.0]})
        datasets.append({"path": str(j), "coordinateTransformations": cts})
    ms = {"axes": axes, "name": "image", "datasets": datasets}
    chunks = (1,) * bool(channels) + (20, 16)
    if version == "0.4":
        g = zarr.open_group(str(img), mode="w")
        for j, data in enumerate(levels):
            g.create_dataset(str(j), data=data, chunks=chunks[-data.ndim:])
        g.attrs["multiscales"] = [{**ms, "version": "0.4"}]
        lab = g.create_group("labels")
        lab.attrs.update({"labels": ["old"], "note": "kept"})
        old = lab.create_group("old")
        old.create_dataset("0", data=np.zeros(levels[0].shape[-2:], "<u4"), chunks=(20, 16))
        old.attrs.update({"multiscales": [{"version": "0.4", "axes": SPACE_AXES,
                                           "datasets": [{"path": "0", "coordinateTransformations":
                                                         [{"type": "scale",
                                                           "scale": [0.5, 0.25]}]}]}],
                          "image-label": {"version": "0.4", "source": {"image": "../../"}}})
        tab = g.create_group("tables")
        tab.attrs["tables"] = ["FOV_ROI_table"]
        fov = tab.create_group("FOV_ROI_table")
        fov.attrs.update({"type": "roi_table", "table_version": "1"})
        fov.create_dataset("X", data=np.ones((1, 6), "<f4"))
    else:
        for j, data in enumerate(levels):
            write_v3_array(img / str(j), data, chunks[-data.ndim:], [a["name"] for a in axes])
        (img / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "group",
            "attributes": {"ome": {"version": "0.5", "multiscales": [ms]}}}))
        (img / "labels").mkdir()
        (img / "labels" / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "group",
            "attributes": {"ome": {"version": "0.5", "labels": ["old"]}, "note": "kept"}}))
        write_v3_array(img / "labels" / "old" / "0", np.zeros(levels[0].shape[-2:], "<u2"),
                       (20, 16), ["y", "x"])
        (img / "tables" / "FOV_ROI_table").mkdir(parents=True)
        (img / "tables" / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "group", "attributes": {"tables": ["FOV_ROI_table"]}}))
        (img / "tables" / "FOV_ROI_table" / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "group", "attributes": {"type": "roi_table"}}))
    return img, levels


def overlay_config(tmp_path, img, level=0, channel=None, output=None, name="seg.ini",
                   table=None, table_format=None):
    out = {"ome": "labels", "dtype": "<u4"}
    if table:
        out["table_name"] = table
    if table_format:
        out["table_format"] = table_format
    out.update(output or {})
    return write_config(tmp_path / name, {
        "input": {"path": img, "level": level, "channel": channel},
        "rois": {"grid": ",".join(map(str, GRID))},
        "process": {"builtin": "label", "param.value": THRESHOLD},
        "output": out,
        "cache": {"dir": tmp_path / "cache"}})


def expected_labels(data):
    """The builtin label over each grid ROI, as SPEC §7 defines it."""
    out = np.zeros(data.shape, "<u4")
    for i in range(0, data.shape[0], GRID[0]):
        for j in range(0, data.shape[1], GRID[1]):
            sl = (slice(i, i + GRID[0]), slice(j, j + GRID[1]))
            out[sl] = ndimage.label(data[sl] > THRESHOLD)[0]
    return out


def nearest(src, shape):
    """Element i of the result is element floor(i * E_src / E_dst) of src (SPEC §11)."""
    idx = [np.arange(n) * e // n for n, e in zip(shape, src.shape)]
    return src[np.ix_(*idx)]


def files_of(root):
    return sorted(p.relative_to(root).as_posix() for p in Path(root).rglob("*") if p.is_file())


def attrs_of(path, v3):
    """A group's attributes: .zattrs (v2) or zarr.json "attributes" (v3)."""
    if v3:
        return json.loads((path / "zarr.json").read_text())["attributes"]
    return json.loads((path / ".zattrs").read_text())


def label_multiscale(mnt, name, v3):
    a = attrs_of(mnt / "labels" / name, v3)
    return (a["ome"] if v3 else a)["multiscales"][0], (a["ome"] if v3 else a)["image-label"]


REPLACED = {"0.4": {"labels/.zattrs", "tables/.zattrs"},
            "0.5": {"labels/zarr.json", "tables/zarr.json"}}


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_overlay_tree(tmp_path, roifs_bin, version):
    """Every file of the input is presented byte for byte; the labels and tables lists gain
    NAME (their other content kept); labels/NAME is an OME-NGFF label image of the parent's
    levels with its scales and translations, valid by the repository's checker, read by
    zarr-python as the computed labels (level 0) and their nearest-neighbour levels; `ls`
    and `cp -r` of the whole mount work."""
    v3 = version == "0.5"
    img, levels = make_image(tmp_path, version)
    config = overlay_config(tmp_path, img, table="seg_table")
    with mounted(roifs_bin, config) as m:
        mnt = m.path
        got = set(files_of(mnt))
        for rel in files_of(img):
            assert rel in got, rel
            if rel not in REPLACED[version]:
                assert (mnt / rel).read_bytes() == (img / rel).read_bytes(), rel
        assert not check_image(mnt, strict=False, dimension_names=False)
        labels = attrs_of(mnt / "labels", v3)
        assert (labels["ome"]["labels"] if v3 else labels["labels"]) == ["old", "seg"]
        assert labels["note"] == "kept"
        assert attrs_of(mnt / "tables", v3)["tables"] == ["FOV_ROI_table", "seg_table"]
        assert "seg" in os.listdir(mnt / "labels") and "seg_table" in os.listdir(mnt / "tables")
        problems = check_image(mnt / "labels" / "seg", strict=False)
        assert not problems, problems
        ms, il = label_multiscale(mnt, "seg", v3)
        assert il["source"]["image"] == "../../"
        parent = (attrs_of(img, v3)["ome"] if v3 else attrs_of(img, v3))["multiscales"][0]
        assert [d["path"] for d in ms["datasets"]] == ["0", "1", "2"]
        assert [d["coordinateTransformations"] for d in ms["datasets"]] == \
            [d["coordinateTransformations"] for d in parent["datasets"]]
        assert [a["name"] for a in ms["axes"]] == ["y", "x"]
        want = expected_labels(levels[0])
        for j, data in enumerate(levels):
            path = mnt / "labels" / "seg" / str(j)
            if v3:
                meta = json.loads((path / "zarr.json").read_text())
                assert meta["dimension_names"] == ["y", "x"]
                assert meta["shape"] == list(data.shape)
            else:
                arr = zarr.open_array(str(path), mode="r")
                assert arr.shape == data.shape
                np.testing.assert_array_equal(arr[...], nearest(want, data.shape))
        dest = tmp_path / "copy"
        subprocess.run(["cp", "-r", str(mnt), str(dest)], check=True, timeout=60)
        for rel in files_of(dest):
            if not rel.startswith(".roifs"):
                assert (dest / rel).read_bytes() == (mnt / rel).read_bytes(), rel
        assert sorted(files_of(dest)) == sorted(files_of(mnt))
