"""[measure] labels = NAME (docs/measurements.md, Measuring a label image of the input): no
[process] nor [rois]; the mount presents the input image as it is (its label image labels/NAME
read through, unchanged) with tables/NAME added, the feature table of that label image's objects
equal to skimage.measure.regionprops_table and numpy to 1e-9 relative; kept in the cache (a
remount reads the record), an edit of the label image or of the intensities measures again only
the label chunks it touches."""
import json
import shutil

import numpy as np
import zarr
from scipy import ndimage

from conftest import mounted, run_roifs, write_config
from test_measure import THRESHOLD, check_table, make_image


def add_labels(img, data, name="cells", chunks=(13, 12)):
    """labels/NAME of img: the objects of channel 0 over THRESHOLD (uint16), chunked so that
    objects cross chunk borders; returns the label array."""
    lab = ndimage.label(data[0] > THRESHOLD)[0].astype("<u2")
    root = zarr.open_group(str(img), mode="r+")
    labels = root.require_group("labels")
    labels.attrs["labels"] = [name]
    g = labels.create_group(name)
    g.create_dataset("0", data=lab, chunks=chunks)
    axes = [{"name": a, "type": "space", "unit": "micrometer"} for a in "yx"]
    g.attrs["multiscales"] = [{"version": "0.4", "name": name, "axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 1.0]}]}]}]
    g.attrs["image-label"] = {"version": "0.4", "colors": [{"label-value": 1, "rgba": [1, 2, 3, 4]}]}
    return lab


def config_of(tmp_path, img, measure=None, **sections):
    return write_config(tmp_path / "meas.ini", {
        "input": {"path": img},
        "measure": {"labels": "cells", "table_name": "feat", **(measure or {})},
        "cache": {"dir": tmp_path / "cache"}, **sections})


def test_measures_the_input_label_image(tmp_path, roifs_bin):
    """The table equals the references over the input's own label image; labels/cells and its
    attributes are the input's, unchanged, and the labels list is not extended; the remount reads
    the record (no label chunk); an edit of one label chunk measures that chunk alone again, and
    an edit of the intensities in one chunk's box measures that chunk alone, copying none."""
    img, data = make_image(tmp_path, (40, 36))
    lab = add_labels(img, data)
    attrs_before = (img / "labels" / "cells" / ".zattrs").read_text()
    config = config_of(tmp_path, img, {"table_format": "csv"})
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "csv", lab, data)
        meta = json.loads((m.path / "tables" / "feat" / ".zattrs").read_text())
        assert meta["region"] == {"path": "../labels/cells"} and meta["type"] == "feature_table"
        assert json.loads((m.path / "tables" / ".zattrs").read_text())["tables"] == ["feat"]
        assert json.loads((m.path / "labels" / ".zattrs").read_text())["labels"] == ["cells"]
        assert (m.path / "labels" / "cells" / ".zattrs").read_text() == attrs_before
        np.testing.assert_array_equal(
            zarr.open_array(str(m.path / "labels" / "cells" / "0"), mode="r")[...], lab)
        st = m.status()
        assert st["measure"]["pieces_made"] == 12 and st["measure"]["objects"] == lab.max(), st
        assert st["measure"]["pieces"] == 0, st  # each partial made as its chunk was copied
        assert st["calls"] == 12 and st["rois"]["total"] == 12, st  # each label chunk copied once
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "csv", lab, data)
        st = m.status()
        assert st["table"] == {"scans": 0, "from_record": 1}, st
        assert st["measure"]["pieces"] == 0, st
    arr = zarr.open_array(str(img / "labels" / "cells" / "0"), mode="r+")
    lab[:5, :5] = 0  # inside label chunk (0, 0) only
    arr[:5, :5] = 0
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "csv", lab, data)
        st = m.status()
        assert st["measure"]["pieces_made"] == 1 and st["measure"]["pieces"] == 0, st
        assert st["measure"]["pieces_from_record"] == 12, st
    img_arr = zarr.open_array(str(img / "0"), mode="r+")
    data[1, 15:20, 14:20] += 7  # inside label chunk (1, 1) only: no label chunk copied again
    img_arr[1, 15:20, 14:20] = data[1, 15:20, 14:20]
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "csv", lab, data)
        st = m.status()
        assert st["calls"] == 0 and st["measure"]["pieces"] == 1, st


def test_edit_of_the_segmented_channel_s_intensities(tmp_path, roifs_bin):
    """An edit of channel 0's intensities in one label chunk's box (the label image unchanged)
    measures that chunk again: the partials' names take the label image's and the intensities'
    signatures apart (image chunks of channel 0 have the label chunks' storage indices)."""
    img, data = make_image(tmp_path, (40, 36))
    lab = add_labels(img, data)
    config = config_of(tmp_path, img)
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "anndata", lab, data)
    data[0, 15:20, 14:20] += 7  # inside label chunk (1, 1) only
    zarr.open_array(str(img / "0"), mode="r+")[0, 15:20, 14:20] = data[0, 15:20, 14:20]
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "anndata", lab, data)
        st = m.status()
        assert st["calls"] == 0 and st["measure"]["pieces"] == 1, st


def test_refuses_process_and_missing_labels(tmp_path, roifs_bin):
    """[process] with [measure] labels, or a label image the input lacks: exit 2; export --into
    another image than the one whose label image is measured is refused, that image untouched."""
    img, data = make_image(tmp_path, (20, 20))
    add_labels(img, data)
    config = config_of(tmp_path, img, process={"builtin": "copy"})
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 2 and "[process]: a mount with [measure] labels" in r.stderr, r.stderr
    config = config_of(tmp_path, img, {"labels": "nuclei"})
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 2 and "[measure] labels:" in r.stderr, r.stderr
    config = config_of(tmp_path, img)
    assert run_roifs(roifs_bin, "check", config).returncode == 0
    other = tmp_path / "other.zarr"
    shutil.copytree(img, other)
    r = run_roifs(roifs_bin, "export", "--into", other, config, timeout=60)
    assert r.returncode == 2 and "into the image whose label image is measured" in r.stderr, \
        r.stderr
    assert not (other / "tables").exists()
    assert zarr.open_group(str(other / "labels"), mode="r").attrs["labels"] == ["cells"]


def test_export_into_the_input_image(tmp_path, roifs_bin):
    """export --into the input image itself writes tables/feat (listed in tables, read back by
    zarr-python and anndata equal to the references) and keeps labels/cells, the image's own,
    as it was (its files and the labels list untouched); a second export is refused without
    --overwrite and replaces the table with it."""
    img, data = make_image(tmp_path, (40, 36))
    lab = add_labels(img, data)
    before = {p: p.read_bytes() for p in sorted((img / "labels").rglob("*")) if p.is_file()}
    config = config_of(tmp_path, img)
    r = run_roifs(roifs_bin, "export", "--into", img, config, timeout=60)
    assert r.returncode == 0 and "tables/feat written" in r.stderr, r.stderr
    after = {p: p.read_bytes() for p in sorted((img / "labels").rglob("*")) if p.is_file()}
    assert after == before
    root = zarr.open_group(str(img), mode="r")
    assert root["tables"].attrs["tables"] == ["feat"]
    assert root["tables/feat"].attrs["type"] == "feature_table"
    assert root["tables/feat"].attrs["region"] == {"path": "../labels/cells"}
    np.testing.assert_array_equal(root["labels/cells/0"][...], lab)
    check_table(img / "tables" / "feat", "anndata", lab, data)
    r = run_roifs(roifs_bin, "export", "--into", img, config, timeout=60)
    assert r.returncode == 2 and "already has a table 'feat'" in r.stderr, r.stderr
    r = run_roifs(roifs_bin, "export", "--into", img, "--overwrite", config, timeout=60)
    assert r.returncode == 0, r.stderr
    check_table(img / "tables" / "feat", "anndata", lab, data)
    assert {p: p.read_bytes() for p in sorted((img / "labels").rglob("*")) if p.is_file()} == before


def test_label_image_of_another_resolution(tmp_path, roifs_bin):
    """labels/cells whose level 0 has the shape of the image's level 1 (a segmentation made at
    half resolution): that image level is measured (anndata), equal to the references over it."""
    img, data = make_image(tmp_path, (40, 36))
    half = np.ascontiguousarray(data[:, ::2, ::2])
    root = zarr.open_group(str(img), mode="r+")
    root.create_dataset("1", data=half, chunks=(1, 7, 6))
    ms = root.attrs["multiscales"]
    ms[0]["datasets"].append({"path": "1", "coordinateTransformations": [
        {"type": "scale", "scale": [1.0, 2.0, 2.0]}]})
    root.attrs["multiscales"] = ms
    lab = add_labels(img, half, chunks=(7, 6))
    config = config_of(tmp_path, img)
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "anndata", lab, half)
        assert m.status()["measure"]["pieces_made"] == 9


def test_clean_unused_after_a_label_edit(tmp_path, roifs_bin):
    """After an edit of one label chunk, `roifs clean --unused` removes the records of the label
    image as it was (the whole table's, the edited chunk's partial) and keeps the current ones:
    a remount reads the table from its record."""
    img, data = make_image(tmp_path, (40, 36))
    lab = add_labels(img, data)
    config = config_of(tmp_path, img, {"table_format": "csv"})
    cache = tmp_path / "cache"
    with mounted(roifs_bin, config) as m:
        (m.path / "tables" / "feat" / "table.csv").read_bytes()
    first = {p.name for p in cache.glob("*.rows")}
    lab[:5, :5] = 0
    zarr.open_array(str(img / "labels" / "cells" / "0"), mode="r+")[:5, :5] = 0
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "csv", lab, data)
    both = {p.name for p in cache.glob("*.rows")}
    r = run_roifs(roifs_bin, "clean", "--unused", config)
    assert r.returncode == 0, r.stderr
    left = {p.name for p in cache.glob("*.rows")}
    assert both - first <= left and sorted(n.split("-")[0] for n in both - left) == [
        "features", "mpiece"], (both, left)
    with mounted(roifs_bin, config) as m:
        check_table(m.path / "tables" / "feat", "csv", lab, data)
        assert m.status()["table"] == {"scans": 0, "from_record": 1}


def test_3d_image_without_channels(tmp_path, roifs_bin):
    """A 3-D image without a c axis and its 3-D label image of int32 ids far apart: one channel
    named 0, every value equal to the references."""
    rng = np.random.default_rng(5)
    shape = (10, 20, 18)
    data = ndimage.gaussian_filter(rng.normal(size=shape), 2.0)
    data = np.clip(data / data.std() * 400 + 400, 0, 1000).astype("<u2")
    img = tmp_path / "img3.zarr"
    g = zarr.open_group(str(img), mode="w")
    g.create_dataset("0", data=data, chunks=(5, 8, 8))
    axes = [{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"]
    g.attrs["multiscales"] = [{"version": "0.4", "name": "img", "axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 3}]}]}]
    lab = (ndimage.label(data > 700)[0] * 1000).astype("<i4")
    lg = g.require_group("labels")
    lg.attrs["labels"] = ["cells"]
    cg = lg.create_group("cells")
    cg.create_dataset("0", data=lab, chunks=(4, 7, 6))
    cg.attrs["multiscales"] = [{"version": "0.4", "name": "cells", "axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 3}]}]}]
    cg.attrs["image-label"] = {"version": "0.4"}
    config = config_of(tmp_path, img)
    with mounted(roifs_bin, config) as m:
        ids = check_table(m.path / "tables" / "feat", "anndata", lab, data[None],
                          channels=("0",), chan_idx=(0,))
        assert len(ids) >= 3 and ids.max() >= 3000
