"""[measure] (docs/measurements.md): tables/NAME, a feature table of every object of the mount's
label image (after ids = unique / sequential and stitching, masked ROIs included), equal to
skimage.measure.regionprops_table and numpy over the object's pixels to 1e-9 relative, in 2-D and
3-D, several channels (one of large intensities, where a raw sum of squares loses the std), as
AnnData (read by anndata) and csv (read by pandas); each ROI computed once; kept in the cache
(a remount reads the merged partials' record: no ROI, no label chunk)."""
import errno
import json
from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import pytest
import zarr
from scipy import ndimage
from skimage.measure import regionprops_table

from conftest import mounted, run_roifs, write_config

BIG = 4_000_000_000  # channel 1's offset: its squares (1.6e19) leave a raw sum of squares no digits
THRESHOLD = 500


def make_image(root, shape, seed=3):
    """An OME-Zarr 0.4 image of uint32 with a c axis first: channel 0 smooth blobs (segmented
    by the builtin label over THRESHOLD), channel 1 BIG + noise, named DAPI and GFP (omero)."""
    rng = np.random.default_rng(seed)
    blobs = ndimage.gaussian_filter(rng.normal(size=shape), 2.0)
    ch0 = np.clip((blobs - blobs.mean()) / blobs.std() * 400 + 400, 0, 1000).astype("<u4")
    ch1 = (BIG + rng.integers(0, 100_000, shape)).astype("<u4")
    data = np.stack([ch0, ch1])
    names = "zyx"[-len(shape):]
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": a, "type": "space", "unit": "micrometer"} for a in names]
    img = root / "img.zarr"
    g = zarr.open_group(str(img), mode="w")
    g.create_dataset("0", data=data, chunks=(1,) + tuple(max(4, s // 3) for s in shape))
    g.attrs["multiscales"] = [{"version": "0.4", "name": "img", "axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1.0] * (len(shape) + 1)}]}]}]
    g.attrs["omero"] = {"channels": [{"label": "DAPI", "wavelength_id": "A01"},
                                     {"label": "GFP", "wavelength_id": "A02"}]}
    return img, data


def config_of(tmp_path, img, grid, labels=None, measure=None, rois=None, name="seg.ini"):
    return write_config(tmp_path / name, {
        "input": {"path": img, "channel": 0},
        "rois": rois or {"grid": ",".join(map(str, grid))},
        "process": {"builtin": "label", "param.value": THRESHOLD},
        "output": {"ome": "labels", "dtype": "<u4"},
        "labels": labels,
        "measure": {"table_name": "feat", **(measure or {})},
        "cache": {"dir": tmp_path / "cache"}})


def read_table(path, backend):
    """(ids, column names, values) of tables/NAME."""
    if backend == "csv":
        df = pd.read_csv(path / "table.csv")
        return df["label"].to_numpy(), list(df.columns[1:]), df.iloc[:, 1:].to_numpy(np.float64)
    ad = anndata.read_zarr(str(path))
    ids = ad.obs.index.astype(np.int64).to_numpy()
    np.testing.assert_array_equal(ad.obs["label"].to_numpy(), ids)
    return ids, list(ad.var.index), np.asarray(ad.X, dtype=np.float64)


def reference(labels, data, channels=("DAPI", "GFP"), chan_idx=(0, 1)):
    """{column: values} in id order: regionprops_table for area, centroid, bbox, mean, min and
    max; numpy for the sum and the population std."""
    nd = labels.ndim
    names = "zyx"[-nd:]
    inten = np.moveaxis(data[list(chan_idx)], 0, -1).astype(np.float64)
    rp = regionprops_table(labels, intensity_image=inten, properties=[
        "label", "area", "centroid", "bbox", "intensity_mean", "intensity_min", "intensity_max"])
    ids = rp["label"]
    out = {"area": rp["area"]}
    for d, a in enumerate(names):
        out[f"centroid-{a}"] = rp[f"centroid-{d}"]
        out[f"bbox-{a}-start"] = rp[f"bbox-{d}"]
        out[f"bbox-{a}-stop"] = rp[f"bbox-{d + nd}"]
    for c, cn in enumerate(channels):
        out[f"{cn}-mean"] = rp[f"intensity_mean-{c}"]
        out[f"{cn}-min"] = rp[f"intensity_min-{c}"]
        out[f"{cn}-max"] = rp[f"intensity_max-{c}"]
        pix = [inten[..., c][labels == i] for i in ids]
        out[f"{cn}-sum"] = np.array([p.sum() for p in pix])
        out[f"{cn}-std"] = np.array([p.std() for p in pix])
    return ids, out


def check_table(path, backend, labels, data, **kw):
    ids, cols, x = read_table(path, backend)
    want_ids, want = reference(labels, data, **kw)
    np.testing.assert_array_equal(ids, want_ids)
    assert sorted(cols) == sorted(want), cols
    for j, c in enumerate(cols):
        np.testing.assert_allclose(x[:, j], want[c], rtol=1e-9, atol=0, err_msg=c)
    return ids


CASES = {  # name: (shape, grid, [labels], [rois] extra)
    "2d-keep": ((40, 36), (16, 16), None, None),
    "2d-unique": ((40, 36), (16, 16), {"ids": "unique", "block": 1000}, None),
    "2d-sequential": ((40, 36), (16, 16), {"ids": "sequential"}, None),
    "2d-stitch": ((40, 36), (16, 16), {"ids": "unique", "block": 1000, "stitch": "iou",
                                       "stitch_iou": 0.3}, {"halo": "3,3"}),
    "3d-unique": ((10, 20, 18), (5, 8, 8), {"ids": "unique", "block": 1000}, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_features_equal_regionprops(tmp_path, roifs_bin, case):
    """Every builtin feature of every object (objects cut by ROIs measured whole) equals
    regionprops_table / numpy to 1e-9 relative; the first read computes each ROI once, later
    reads of the table's files compute nothing more."""
    shape, grid, labels, extra = CASES[case]
    img, data = make_image(tmp_path, shape)
    rois = {"grid": ",".join(map(str, grid)), **(extra or {})}
    backend = "csv" if case == "2d-sequential" else "anndata"
    config = config_of(tmp_path, img, grid, labels, {"table_format": backend}, rois=rois)
    with mounted(roifs_bin, config) as m:
        path = m.path / "tables" / "feat"
        attrs = json.loads((path / ".zattrs").read_text())
        assert {k: attrs[k] for k in ("type", "table_version", "region", "instance_key")} == {
            "type": "feature_table", "table_version": "1", "region": {"path": "../labels/seg"},
            "instance_key": "label"}
        assert "feat" in json.loads((m.path / "tables" / ".zattrs").read_text())["tables"]
        st = m.status()
        nrois, calls = st["rois"]["total"], st["calls"]
        assert calls == nrois, st
        lab = zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...]
        ids = check_table(path, backend, lab, data)
        assert len(ids) >= 5
        if labels and labels.get("stitch"):  # some objects were cut and merged
            plain = ndimage.label(data[0] > THRESHOLD)[0]
            assert len(ids) < len(np.unique(plain[plain > 0])) + nrois
        assert m.status()["calls"] == nrois and m.status()["table"]["scans"] == 1


def test_std_of_large_intensities_is_exact(tmp_path, roifs_bin):
    """Channel GFP (4e9 + noise): the table's std equals numpy's to 1e-9 where the raw formula
    sqrt(E[x^2] - E[x]^2) in float64 is off by far more (so the check can fail); intensity
    picks channels by name (wavelength_id) and by index."""
    img, data = make_image(tmp_path, (40, 36))
    config = config_of(tmp_path, img, (16, 16), None, {"intensity": "A02, 0"})
    with mounted(roifs_bin, config) as m:
        lab = zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...]
        ids = check_table(m.path / "tables" / "feat", "anndata", lab, data,
                          channels=("GFP", "DAPI"), chan_idx=(1, 0))
    x = data[1].astype(np.float64)
    worst = 0.0
    for i in ids:
        p = x[lab == i]
        if p.size < 2:
            continue
        raw = np.sqrt(max(np.mean(p * p) - np.mean(p) ** 2, 0.0))
        worst = max(worst, abs(raw - p.std()) / p.std())
    assert worst > 1e-6, worst


def test_masked_rois(tmp_path, roifs_bin):
    """Masked ROIs (@ L): only the mask's object takes the ROI's labels; the table measures the
    label image as it is."""
    img, data = make_image(tmp_path, (40, 36))
    mask = np.zeros((40, 36), "<u2")
    mask[2:30, 3:25] = 5
    mask[20:38, 20:34] = 9
    zarr.save_array(str(tmp_path / "mask.zarr"), mask, chunks=(16, 16))
    (tmp_path / "rois.txt").write_text("0:32, 0:28 @ 5\n16:40, 16:36 @ 9\n")
    config = config_of(tmp_path, img, None, {"ids": "unique", "block": 1000}, None,
                       rois={"file": tmp_path / "rois.txt", "mask": tmp_path / "mask.zarr"})
    with mounted(roifs_bin, config) as m:
        lab = zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...]
        assert lab[mask == 0].max() == 0 and lab.max() > 0
        check_table(m.path / "tables" / "feat", "anndata", lab, data)


def test_record_and_incremental(tmp_path, roifs_bin):
    """A remount of the same labels and intensities reads the whole table's record: no ROI
    computed, no label chunk read. An edit of the intensity channel alone measures again only
    the label chunk whose box it touches (the others' partials from their records; no ROI
    computed); an edit of the segmented channel computes again only the ROIs it touches and
    measures only the label chunks whose keys changed. Every table exact."""
    img, data = make_image(tmp_path, (40, 36))
    config = config_of(tmp_path, img, (16, 16), {"ids": "unique", "block": 1000},
                       {"table_format": "csv"})
    path = Path("tables") / "feat"
    with mounted(roifs_bin, config) as m:
        lab = zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...]
        check_table(m.path / path, "csv", lab, data)
        st = m.status()
        assert st["table"] == {"scans": 1, "from_record": 0}
        nchunks, nrois = st["measure"]["pieces_made"], st["rois"]["total"]
        assert nchunks == 12 and st["measure"]["objects"] == len(np.unique(lab)) - 1, st
        assert st["measure"]["pieces"] == 0, st  # partials made with the chunks read above
    with mounted(roifs_bin, config) as m:
        check_table(m.path / path, "csv", lab, data)
        st = m.status()
        assert st["calls"] == 0 and st["table"] == {"scans": 0, "from_record": 1}, st
        assert st["measure"]["pieces"] == 0 and st["measure"]["pieces_from_record"] == 0, st
    arr = zarr.open_array(str(img / "0"), mode="r+")
    arr[1, :8, :8] = data[1, :8, :8] + 7  # inside label chunk (0, 0) only (chunks 13 x 12)
    data[1, :8, :8] += 7
    with mounted(roifs_bin, config) as m:
        check_table(m.path / path, "csv", lab, data)
        st = m.status()
        assert st["calls"] == 0 and st["table"]["scans"] == 1, st
        assert st["measure"]["pieces"] == 1, st
        assert st["measure"]["pieces_from_record"] == nchunks - 1, st
    data[0, 30:, 30:] = 0  # ROIs (1, 1), (1, 2), (2, 1), (2, 2) change
    arr[0, 30:, 30:] = 0
    with mounted(roifs_bin, config) as m:
        lab2 = zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...]
        assert (lab2 != lab).any()
        check_table(m.path / path, "csv", lab2, data)
        st = m.status()
        assert st["calls"] == 4 < nrois, st
        assert 0 < st["measure"]["pieces_made"] < nchunks and st["measure"]["pieces"] == 0, st
        assert st["measure"]["pieces_from_record"] == nchunks, st


def test_table_after_warm_reads_no_label_chunk(tmp_path, roifs_bin):
    """Each label chunk's partial is made while the engine makes the chunk (the chunk in
    memory): after `roifs warm`, the mount's first read of the table reads every partial from
    its record and no label chunk (status measure.pieces 0), computes no ROI, and equals the
    references; in a mount, the table read after every label chunk was read reads none again
    either (pieces_made counts the partials made with the chunks)."""
    img, data = make_image(tmp_path, (40, 36))
    labels = {"ids": "unique", "block": 1000, "stitch": "iou", "stitch_iou": 0.3}
    config = config_of(tmp_path, img, (16, 16), labels, rois={"grid": "16,16", "halo": "3,3"})
    r = run_roifs(roifs_bin, "warm", config, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(list((tmp_path / "cache").glob("mpiece-*.rows"))) == 12
    assert not list((tmp_path / "cache").glob("features-*.rows"))
    with mounted(roifs_bin, config) as m:
        lab = zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...]
        check_table(m.path / "tables" / "feat", "anndata", lab, data)
        st = m.status()
        assert st["calls"] == 0 and st["table"] == {"scans": 1, "from_record": 0}, st
        assert st["measure"]["pieces"] == 0 and st["measure"]["pieces_made"] == 0, st
        assert st["measure"]["pieces_from_record"] == 12, st
    (tmp_path / "fresh").mkdir()  # another cache: the chunks made in the mount
    config = config_of(tmp_path / "fresh", img, (16, 16), labels,
                       rois={"grid": "16,16", "halo": "3,3"})
    with mounted(roifs_bin, config) as m:
        assert zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...].max() > 0
        assert m.status()["measure"]["pieces_made"] == 12
        check_table(m.path / "tables" / "feat", "anndata", lab, data)
        st = m.status()
        assert st["measure"]["pieces"] == 0, st
        assert st["measure"]["pieces_from_record"] == 12, st


@pytest.mark.parametrize("measure, output, message", [
    ({"table_name": None, "features": "area"}, {}, "[measure] table_name is required"),
    ({"features": "volume"}, {}, "unknown feature 'volume'"),
    ({}, {"table_name": "feat"}, "[output] table_name: 'feat' is [measure] table_name's"),
    ({"intensity": "CY5"}, {}, "[measure] intensity: no channel 'CY5'"),
])
def test_refusals(tmp_path, roifs_bin, measure, output, message):
    img, _ = make_image(tmp_path, (20, 20))
    config = write_config(tmp_path / "seg.ini", {
        "input": {"path": img, "channel": 0},
        "rois": {"grid": "10,10"},
        "process": {"builtin": "label", "param.value": THRESHOLD},
        "output": {"ome": "labels", "dtype": "<u4", **output},
        "measure": {"table_name": "feat", **measure},
        "cache": {"dir": tmp_path / "cache"}})
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_failed_roi_fails_the_table(tmp_path, roifs_bin):
    """A ROI that fails (ids = unique, a ROI with more objects than block) fails the table's
    files with EIO, logged, counted in status measure.failed; no record is written, and a
    later read tries again (and fails again)."""
    img, _ = make_image(tmp_path, (40, 36))
    config = config_of(tmp_path, img, (16, 16), {"ids": "unique", "block": 2})
    with mounted(roifs_bin, config) as m:
        x = m.path / "tables" / "feat" / "X" / "0.0"
        for attempt in (1, 2):
            with pytest.raises(OSError) as e:
                x.read_bytes()
            assert e.value.errno == errno.EIO
            assert m.status()["measure"]["failed"] == attempt
        assert "feature table" in m.log_text() or "block" in m.log_text()
    assert not list((tmp_path / "cache").glob("features-*.rows"))


def test_clean_unused_keeps_only_current_records(tmp_path, roifs_bin):
    """`roifs clean --unused` removes the feature table's records of an earlier input (the
    whole table's and the partial of the chunk whose intensities changed) and keeps those of
    the input as it is now: a remount then reads the table from its record."""
    img, data = make_image(tmp_path, (40, 36))
    config = config_of(tmp_path, img, (16, 16), {"ids": "unique", "block": 1000})
    cache = tmp_path / "cache"
    with mounted(roifs_bin, config) as m:
        (m.path / "tables" / "feat" / "X" / "0.0").read_bytes()
    first = {p.name for p in cache.glob("*.rows")}
    assert len([n for n in first if n.startswith("mpiece-")]) == 12, first
    arr = zarr.open_array(str(img / "0"), mode="r+")
    arr[1, :8, :8] = data[1, :8, :8] + 7
    with mounted(roifs_bin, config) as m:
        (m.path / "tables" / "feat" / "X" / "0.0").read_bytes()
    both = {p.name for p in cache.glob("*.rows")}
    new = both - first
    assert len(new) == 2, new  # the whole table's record and chunk (0, 0)'s partial
    r = run_roifs(roifs_bin, "clean", "--unused", config)
    assert r.returncode == 0, r.stderr
    left = {p.name for p in cache.glob("*.rows")}
    gone = both - left
    assert new <= left and gone <= first, (gone, new)
    assert sorted(n.split("-")[0] for n in gone) == ["features", "mpiece"], gone
    with mounted(roifs_bin, config) as m:
        (m.path / "tables" / "feat" / "X" / "0.0").read_bytes()
        st = m.status()
        assert st["table"] == {"scans": 0, "from_record": 1}, st


def test_export_into_writes_the_feature_table(tmp_path, roifs_bin):
    """roifs export --into IMAGE writes labels/seg and the feature table tables/feat into the
    image and lists them; the table read back with anndata equals regionprops / numpy."""
    img, data = make_image(tmp_path, (40, 36))
    config = config_of(tmp_path, img, (16, 16), {"ids": "unique", "block": 1000})
    r = run_roifs(roifs_bin, "export", "--into", img, config, timeout=120)
    assert r.returncode == 0, r.stderr
    assert zarr.open_group(str(img / "tables"), mode="r").attrs["tables"] == ["feat"]
    assert json.loads((img / "tables" / "feat" / ".zattrs").read_text())["type"] == \
        "feature_table"
    lab = zarr.open_array(str(img / "labels" / "seg" / "0"), mode="r")[...]
    check_table(img / "tables" / "feat", "anndata", lab, data)


def test_one_channel_input_and_chosen_features(tmp_path, roifs_bin):
    """An input without a c axis is one channel, named 0; features = area, intensity gives
    only those columns (area, then 0-sum, 0-mean, 0-min, 0-max, 0-std), equal to the
    references."""
    img, data = make_image(tmp_path, (40, 36))
    one = tmp_path / "one.zarr"
    g = zarr.open_group(str(one), mode="w")
    g.create_dataset("0", data=data[0], chunks=(13, 12))
    ms = dict(zarr.open_group(str(img), mode="r").attrs["multiscales"][0])
    ms["axes"] = ms["axes"][1:]
    ms["datasets"] = [{"path": "0", "coordinateTransformations": [
        {"type": "scale", "scale": [1.0, 1.0]}]}]
    g.attrs["multiscales"] = [ms]
    config = write_config(tmp_path / "seg.ini", {
        "input": {"path": one},
        "rois": {"grid": "16,16"},
        "process": {"builtin": "label", "param.value": THRESHOLD},
        "output": {"ome": "labels", "dtype": "<u4"},
        "measure": {"table_name": "feat", "features": "intensity, area",
                    "table_format": "csv"},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, config) as m:
        lab = zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...]
        ids, cols, x = read_table(m.path / "tables" / "feat", "csv")
    assert cols == ["area", "0-sum", "0-mean", "0-min", "0-max", "0-std"], cols
    want_ids, want = reference(lab, data[:1], channels=("0",), chan_idx=(0,))
    np.testing.assert_array_equal(ids, want_ids)
    for j, c in enumerate(cols):
        np.testing.assert_allclose(x[:, j], want[c], rtol=1e-9, atol=0, err_msg=c)


def test_masking_table_beside_the_feature_table(tmp_path, roifs_bin):
    """[output] table_name with [measure]: tables/masks (the masking table, from the merged
    partials' boxes) is byte for byte the one a mount without [measure] presents, beside
    tables/feat (equal to the references); both listed in tables; a remount makes both from
    the feature table's record (no label chunk); export --into writes both tables beside the
    labels, each listed (refused on 29f608e), a taken name refused, --overwrite replaces."""
    img, data = make_image(tmp_path, (40, 36))
    labels = {"ids": "unique", "block": 1000}
    plain = write_config(tmp_path / "plain.ini", {
        "input": {"path": img, "channel": 0},
        "rois": {"grid": "16,16"},
        "process": {"builtin": "label", "param.value": THRESHOLD},
        "output": {"ome": "labels", "dtype": "<u4", "table_name": "masks", "label_name": "seg"},
        "labels": labels, "cache": {"dir": tmp_path / "cache_plain"}})
    want = {}
    with mounted(roifs_bin, plain, mnt=tmp_path / "mnt_plain") as m:
        root = m.path / "tables" / "masks"
        for p in sorted(root.rglob("*")):
            if p.is_file():
                want[str(p.relative_to(root))] = p.read_bytes()
    config = write_config(tmp_path / "seg.ini", {
        "input": {"path": img, "channel": 0},
        "rois": {"grid": "16,16"},
        "process": {"builtin": "label", "param.value": THRESHOLD},
        "output": {"ome": "labels", "dtype": "<u4", "table_name": "masks"},
        "labels": labels,
        "measure": {"table_name": "feat"},
        "cache": {"dir": tmp_path / "cache"}})
    for mount in (1, 2):
        with mounted(roifs_bin, config) as m:
            root = m.path / "tables" / "masks"
            got = {str(p.relative_to(root)): p.read_bytes()
                   for p in sorted(root.rglob("*")) if p.is_file()}
            assert got == want and len(want) >= 3, (sorted(got), sorted(want))
            lab = zarr.open_array(str(m.path / "labels" / "seg" / "0"), mode="r")[...]
            check_table(m.path / "tables" / "feat", "anndata", lab, data)
            tables = json.loads((m.path / "tables" / ".zattrs").read_text())["tables"]
            assert sorted(tables) == ["feat", "masks"]
            st = m.status()
            if mount == 2:
                assert st["calls"] == 0 and st["table"] == {"scans": 0, "from_record": 1}, st
    # export --into writes both tables beside the labels, each listed (refused on 29f608e)
    r = run_roifs(roifs_bin, "export", "--into", img, config, timeout=60)
    assert r.returncode == 0 and "tables/masks" in r.stderr, r.stderr
    root = img / "tables" / "masks"
    got = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    assert got == want
    check_table(img / "tables" / "feat", "anndata", lab, data)
    assert json.loads((img / "tables" / ".zattrs").read_text())["tables"][-2:] == ["feat", "masks"]
    assert "seg" in json.loads((img / "labels" / ".zattrs").read_text())["labels"]
    np.testing.assert_array_equal(zarr.open_array(str(img / "labels/seg/0"), mode="r")[...], lab)
    assert not list(img.rglob(".roifs-*"))
    r = run_roifs(roifs_bin, "export", "--into", img, config, timeout=60)
    assert r.returncode == 2 and "already has a label 'seg'" in r.stderr, r.stderr
    r = run_roifs(roifs_bin, "export", "--into", img, "--overwrite", config, timeout=60)
    assert r.returncode == 0, r.stderr
    check_table(img / "tables" / "feat", "anndata", lab, data)
