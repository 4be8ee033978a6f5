"""[measure] on an HCS plate (docs/plates.md, docs/measurements.md): every selected image gets
tables/NAME, its feature table exactly as a mount of that image alone gives it (equal to
skimage's regionprops over that image's labels, ids numbered per image), and the plate gets
MNT/tables/NAME: every image's feature rows in plate order with the columns row, column,
path_in_well, path_in_plate and acquisition_id and the index PATH_IN_PLATE:LABEL, against a
reference built here from the images' own tables (AnnData and csv, NGFF 0.4 and 0.5)."""
import errno
import json

import anndata
import numpy as np
import pandas as pd
import pytest
import zarr

from conftest import mounted, write_config
from test_measure import check_table
from test_overlay import THRESHOLD, make_image
from test_plate import attrs, make_plate, set_channels, without_provenance

ORDER = ["B/03/0", "B/03/1", "C/05/0"]  # make_plate's Fractal layout, in plate order
ACQ = {"B/03/0": "0", "B/03/1": "1", "C/05/0": "0"}
SEEDS = {"B/03/0": 2, "B/03/1": 3, "C/05/0": 4}  # make_plate's seed of each image


def measure_config(path, inp, cache, fmt):
    return write_config(path, {
        "input": {"path": inp, "channel": 0},
        "rois": {"grid": "16,16"},
        "process": {"builtin": "label", "param.value": THRESHOLD, "threads": 2},
        "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg"},
        "measure": {"table_name": "feat", "table_format": fmt},
        "cache": {"dir": cache}})


def read_labels(path, version):
    """Level 0 of a label image the mount presents (format 3: uncompressed "/" chunks)."""
    if version == "0.4":
        return zarr.open_array(str(path), mode="r")[...]
    meta = json.loads((path / "zarr.json").read_text())
    assert [c["name"] for c in meta["codecs"]] == ["bytes"], meta["codecs"]
    shape, chunks = meta["shape"], meta["chunk_grid"]["configuration"]["chunk_shape"]
    out = np.zeros(shape, "<u4")
    for idx in np.ndindex(*[-(-s // c) for s, c in zip(shape, chunks)]):
        blk = np.frombuffer((path / "c" / "/".join(map(str, idx))).read_bytes(), "<u4")
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, shape))
        out[sl] = blk.reshape(chunks)[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def image_frame(path, fmt):
    """tables/NAME of one image as a frame: label, then the features."""
    if fmt == "csv":
        return pd.read_csv(path / "table.csv")
    a = anndata.read_zarr(str(path))
    return pd.concat([a.obs[["label"]].reset_index(drop=True),
                      pd.DataFrame(a.X, columns=list(a.var_names))], axis=1)


def plate_frame(path, fmt, extra):
    """MNT/tables/NAME as a frame: index, label, the features, the extra columns."""
    if fmt == "csv":
        return pd.read_csv(path / "table.csv", dtype={k: str for k in extra})
    a = anndata.read_zarr(str(path))
    obs = a.obs.reset_index(drop=True)
    assert a.X.dtype == np.float64
    return pd.concat([pd.DataFrame({"index": list(a.obs_names)}), obs[["label"]],
                      pd.DataFrame(a.X, columns=list(a.var_names)), obs[extra]], axis=1)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("version,fmt", [("0.4", "anndata"), ("0.4", "csv"), ("0.5", "csv")])
def test_plate_feature_tables(tmp_path, roifs_bin, version, fmt):
    """Each image's tables/feat equals regionprops over that image's labels and intensities and
    is the single-image mount's, file for file; MNT/tables/feat is their concatenation with the
    plate's columns and index, a "feature_table" listed in the plate's tables."""
    plate, images = make_plate(tmp_path, version, "fractal", channels=2)
    config = measure_config(tmp_path / "p.ini", plate, tmp_path / "cache", fmt)
    extra = ["row", "column", "path_in_well", "path_in_plate", "acquisition_id"]
    frames, files = [], {}
    with mounted(roifs_bin, config) as m:
        assert attrs(m.path / "tables", version)["tables"] == ["feat"]
        for p in ORDER:
            table = m.path / p / "tables/feat"
            assert "feat" in attrs(m.path / p / "tables", version)["tables"], p
            lab = read_labels(m.path / p / "labels/seg/0", version)
            _, levels = make_image(tmp_path / f"ref{p.replace('/', '')}", "0.4", seed=SEEDS[p],
                                   channels=2)
            ids = check_table(table, fmt, lab, levels[0], channels=("0", "1"))
            assert len(ids) >= 3 and ids[0] == 1, (p, ids)  # ids of the image alone
            files[p] = {f.relative_to(table).as_posix(): f.read_bytes()
                        for f in table.rglob("*") if f.is_file()}
            t = image_frame(table, fmt)
            t.insert(0, "index", [f"{p}:{lab}" for lab in t["label"]])
            row, col, in_well = p.split("/")
            for k, v in zip(extra, (row, col, in_well, p, ACQ[p])):
                t[k] = v
            frames.append(t)
        want = pd.concat(frames, ignore_index=True)
        ta = attrs(m.path / "tables/feat", version)
        assert ta["type"] == "feature_table" and ta["index_key"] == "index", ta
        assert ta["backend"] == fmt, ta
        got = plate_frame(m.path / "tables/feat", fmt, extra)
        assert list(got.columns) == list(want.columns)
        pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=0, atol=0)
        st = m.status()
        assert st["images"]["failed"] == 0 and st["calls"] == st["rois"]["total"], st
        assert st["measure"]["objects"] == len(want) and st["measure"]["failed"] == 0, st
    # one image of the plate against a mount of that image alone: the same files
    p = "B/03/1"
    single = measure_config(tmp_path / "single.ini", images[p], tmp_path / "c1", fmt)
    with mounted(roifs_bin, single, mnt=tmp_path / "single") as m:
        table = m.path / "tables/feat"
        alone = {f.relative_to(table).as_posix(): f.read_bytes()
                 for f in table.rglob("*") if f.is_file()}
        alone_frame = image_frame(table, fmt)
    assert sorted(alone) == sorted(files[p])
    for rel in alone:  # the values: the partials' summation order may differ (measurements.md: 1e-9)
        if not rel.startswith("X/") and rel != "table.csv":
            assert without_provenance(alone[rel], rel) == without_provenance(files[p][rel], rel)
    mine = frames[ORDER.index(p)][list(alone_frame.columns)]
    pd.testing.assert_frame_equal(mine, alone_frame, check_dtype=False, rtol=1e-12)


@pytest.mark.timeout(120)
def test_plate_feature_table_narrowed_and_with_a_failed_image(tmp_path, roifs_bin):
    """acquisition narrows the plate's feature table to the selected images (B/03/1 is of
    acquisition 1); a selected image that is missing (C/05/0) fails alone: no rows of it, EIO on
    its table, and the other images' rows are their own tables'. A remount gives the same table
    from the images' records, computing nothing; the status sums the images' measure counts."""
    plate, images = make_plate(tmp_path, "0.4", "fractal", channels=2, skip_images=("C/05/0",))
    config = measure_config(tmp_path / "p.ini", plate, tmp_path / "cache", "csv")
    config.write_text(config.read_text().replace("channel = 0", "channel = 0\nacquisition = 0"))
    with mounted(roifs_bin, config) as m:
        got = pd.read_csv(m.path / "tables/feat/table.csv", dtype={"path_in_well": str})
        assert list(got["path_in_plate"].unique()) == ["B/03/0"]
        assert not (m.path / "B/03/1/tables/feat").exists()
        with pytest.raises(OSError) as e:
            (m.path / "C/05/0/tables/feat/.zattrs").read_bytes()
        assert e.value.errno == errno.EIO
        own = pd.read_csv(m.path / "B/03/0/tables/feat/table.csv")
        assert len(own) >= 3
        pd.testing.assert_frame_equal(got[list(own.columns)], own, check_dtype=False)
        assert [f["path"] for f in m.status()["failed_images"]] == ["C/05/0"]
        first = (m.path / "tables/feat/table.csv").read_bytes()
    # a remount reads each image's record: the same table, no ROI computed, no chunk measured
    with mounted(roifs_bin, config) as m:
        assert (m.path / "tables/feat/table.csv").read_bytes() == first
        st = m.status()
        assert st["calls"] == 0 and st["measure"]["pieces"] == 0, st
        assert st["measure"]["objects"] == len(got), st


@pytest.mark.timeout(120)
def test_plate_feature_table_of_images_naming_channels_differently(tmp_path, roifs_bin):
    """Channels named by each image's omero.channels (`channel = DAPI` resolved per image): the
    plate's columns are every image's, once each in the order first met, an image's row NaN in
    the columns it has not (pandas' outer concat of the images' tables); an image whose channels
    come in another order has its values under the right names."""
    plate, images = make_plate(tmp_path, "0.4", "fractal", channels=2)
    set_channels(images["B/03/0"], "0.4", ["DAPI", "GFP"])
    set_channels(images["B/03/1"], "0.4", ["GFP", "DAPI"])
    set_channels(images["C/05/0"], "0.4", ["DAPI", "RFP"])
    config = measure_config(tmp_path / "p.ini", plate, tmp_path / "cache", "csv")
    config.write_text(config.read_text().replace("channel = 0", "channel = DAPI"))
    extra = ["row", "column", "path_in_well", "path_in_plate", "acquisition_id"]
    with mounted(roifs_bin, config) as m:
        frames = []
        for p in ORDER:
            t = pd.read_csv(m.path / p / "tables/feat/table.csv")
            assert len(t) >= 3, p
            t.insert(0, "index", [f"{p}:{lab}" for lab in t["label"]])
            frames.append(t)
        got = pd.read_csv(m.path / "tables/feat/table.csv", dtype={k: str for k in extra})
    want = pd.concat(frames, ignore_index=True)  # the columns' union, first met first
    assert [c for c in want.columns if c.endswith("-sum")] == ["DAPI-sum", "GFP-sum",
                                                               "RFP-sum"]
    assert list(got.columns) == list(want.columns) + extra
    assert got["RFP-sum"].isna().sum() == len(frames[0]) + len(frames[1])
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_dtype=False)


FEAT = '''
import numpy as np


def measure(labels, intensity, obj):
    m = labels == obj["label"]
    return {"npix": int(m.sum()), "ch1_max": float(intensity[1][m].max()),
            "ch0_mean": float(intensity[0][m].mean())}
'''


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["csv", "anndata"])
def test_plate_feature_table_has_the_python_features(tmp_path, roifs_bin, fmt):
    """`[measure] python = feat.py:measure` on a plate: MNT/tables/feat has every column of the
    images' tables, the builtin ones then the function's (npix, ch1_max, ch0_mean), each image's
    rows with the values of its own table (on 29f608e the plate's table had only the builtin
    columns)."""
    plate, images = make_plate(tmp_path, "0.4", "fractal", channels=2)
    (tmp_path / "feat.py").write_text(FEAT)
    config = measure_config(tmp_path / "p.ini", plate, tmp_path / "cache", fmt)
    config.write_text(config.read_text().replace("[measure]", "[measure]\npython = feat.py:measure"))
    extra = ["row", "column", "path_in_well", "path_in_plate", "acquisition_id"]
    with mounted(roifs_bin, config) as m:
        got = plate_frame(m.path / "tables/feat", fmt, extra)
        frames = []
        for p in ORDER:
            t = image_frame(m.path / p / "tables/feat", fmt)
            assert len(t) >= 3 and list(t.columns[-3:]) == ["npix", "ch1_max", "ch0_mean"], \
                (p, list(t.columns))
            t.insert(0, "index", [f"{p}:{lab}" for lab in t["label"]])
            row, col, in_well = p.split("/")
            for k, v in zip(extra, (row, col, in_well, p, ACQ[p])):
                t[k] = v
            frames.append(t)
        st = m.status()
        assert st["images"]["failed"] == 0 and st["measure"]["failed"] == 0, st
    want = pd.concat(frames, ignore_index=True)
    assert list(got.columns) == list(want.columns)
    assert (want["npix"] == want["area"]).all()  # the function's own values
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=0, atol=0)
