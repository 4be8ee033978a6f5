"""OME-Zarr inputs and ROI tables (docs/ome-fractal.md#ome-zarr-inputs-and-roi-tables: [input]
path/level, [rois] table/rounding): a Fractal-style plate image (plate.zarr/B/03/0, axes c,z,y,x, 4
levels coarsened by 2 in y and x) written with zarr-python, ROI tables written with anndata
(Fractal's AnnData layout, with a multi-chunk X and column-name array), the same tables in
anndata's Zarr v3 layout (OME-NGFF 0.5 images' tables: "string" arrays with vlen-utf8 and zstd,
written here with numcodecs, as Debian's zarr-python writes only v2) and an ngio CSV table. Mounted
results are checked against boxes computed here from the rounding rules of docs/configuration.md
([rois] rounding), exact half-pixel ties included, for both rounding modes."""
import json
import math
import shutil
import warnings

import numcodecs
import numpy as np
import pandas as pd
import pytest
import zarr

from conftest import image_level_task, line_of, mounted, run_roifs, write_config

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import anndata as ad
    from anndata.experimental import write_elem

COLS = ["x_micrometer", "y_micrometer", "z_micrometer", "len_x_micrometer",
        "len_y_micrometer", "len_z_micrometer", "x_micrometer_original",
        "y_micrometer_original"]
PX0 = 0.1625
SHAPE0 = (2, 3, 96, 128)  # c, z, y, x
CHUNKS = (1, 1, 32, 32)
LEVELS = 4


def level_shape(level):
    return SHAPE0[:2] + (SHAPE0[2] >> level, SHAPE0[3] >> level)


def make_plate(root):
    """plate.zarr/B/03/0 with levels 0..3; returns (image path, list of level arrays)."""
    plate = zarr.open_group(str(root / "plate.zarr"), mode="w")
    plate.attrs["plate"] = {"columns": [{"name": "03"}], "rows": [{"name": "B"}],
                            "wells": [{"path": "B/03", "rowIndex": 0, "columnIndex": 0}],
                            "version": "0.4"}
    well = plate.create_group("B").create_group("03")
    well.attrs["well"] = {"images": [{"path": "0"}], "version": "0.4"}
    img = well.create_group("0")
    rng = np.random.default_rng(5)
    data = [rng.integers(0, 1000, SHAPE0).astype("<u2")]
    for _ in range(1, LEVELS):
        d = data[-1]
        data.append(d.reshape(d.shape[0], d.shape[1], d.shape[2] // 2, 2, d.shape[3] // 2, 2)
                    .mean(axis=(3, 5)).round().astype("<u2"))
    for lv, d in enumerate(data):
        z = img.create_dataset(str(lv), shape=d.shape, chunks=CHUNKS, dtype=d.dtype,
                               dimension_separator="/")
        z[...] = d
    img.attrs["multiscales"] = [{
        "axes": [{"name": "c", "type": "channel"},
                 {"name": "z", "type": "space", "unit": "micrometer"},
                 {"name": "y", "type": "space", "unit": "micrometer"},
                 {"name": "x", "type": "space", "unit": "micrometer"}],
        "datasets": [{"path": str(lv), "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 1.0, PX0 * 2 ** lv, PX0 * 2 ** lv]}]}
            for lv in range(LEVELS)],
        "version": "0.4"}]
    img.attrs["omero"] = {"channels": [{"label": "DAPI", "wavelength_id": "A01_C01"}]}
    return root / "plate.zarr" / "B" / "03" / "0", data


def fov_rows():
    """ROIs in micrometers at level-1 pixels (0.325 um): exact half-pixel ties both ways,
    non-aligned values, one running past the image, one outside it."""
    p = PX0 * 2
    rows = [
        # x, y, z, len_x, len_y, len_z (um)
        (0.0, 0.0, 0.0, 20 * p, 16 * p, 1.0),
        (2.5 * p, 3.5 * p, 1.0, 10 * p, 5 * p, 2.0),   # ties: 2.5 -> 2, 3.5 -> 4
        (7.3 * p, 11.5 * p, 0.0, 9.4 * p, 6.2 * p, 3.0),
        (50.5 * p, 40.0 * p, 2.0, 30 * p, 20 * p, 1.0),  # x past the edge (64 columns)
        (100.0 * p, 0.0, 0.0, 5 * p, 5 * p, 1.0),        # outside: dropped
    ]
    return np.array([r + (1000.0 + i, 2000.0) for i, r in enumerate(rows)], dtype=np.float32)


def write_anndata_table(tables, name, X, ttype, multi_chunk=False):
    a = ad.AnnData(X=X)
    a.obs_names = [f"FOV_{i + 1}" for i in range(X.shape[0])]
    a.var_names = COLS[:X.shape[1]]
    if ttype == "masking_roi_table":
        a.obs["label"] = [str(i + 1) for i in range(X.shape[0])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_elem(tables, name, a)
    g = tables[name]
    g.attrs.update({"fractal_table_version": "1", "type": ttype})
    if ttype == "masking_roi_table":
        g.attrs.update({"region": {"path": "../labels/nuclei"}, "instance_key": "label"})
    if multi_chunk:  # rewrite X and the column names in several (zstd / zlib) chunks
        attrs = dict(g["X"].attrs)
        del g["X"]
        x = g.create_dataset("X", data=X, chunks=(2, 3), compressor=numcodecs.Zstd(3))
        x.attrs.update(attrs)
        attrs = dict(g["var/_index"].attrs)
        del g["var/_index"]
        v = g["var"].create_dataset("_index", data=np.array(COLS[:X.shape[1]], dtype=object),
                                    object_codec=numcodecs.VLenUTF8(), chunks=(4,),
                                    compressor=numcodecs.Zlib(5))
        v.attrs.update(attrs)


def v3_json(path, node):
    path.mkdir(parents=True, exist_ok=True)
    (path / "zarr.json").write_text(json.dumps({"zarr_format": 3, **node}))


def v3_array(path, data, chunks, attrs):
    """A Zarr v3 array as zarr-python 3 writes it: float32 with bytes and zstd, or strings
    (data_type "string") with vlen-utf8 and zstd; edge chunks padded to the full chunk."""
    strings = data.dtype == object
    v3_json(path, {
        "node_type": "array", "shape": list(data.shape),
        "data_type": "string" if strings else "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "" if strings else 0.0,
        "codecs": [{"name": "vlen-utf8", "configuration": {}} if strings else
                   {"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "zstd", "configuration": {"level": 0, "checksum": False}}],
        "attributes": attrs})
    for idx in np.ndindex(*(-(-n // c) for n, c in zip(data.shape, chunks))):
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks))
        block = np.full(chunks, "" if strings else 0, dtype=object if strings else "<f4")
        part = data[sl]
        block[tuple(slice(0, n) for n in part.shape)] = part
        raw = numcodecs.VLenUTF8().encode(block.ravel()) if strings else block.tobytes()
        f = path.joinpath("c", *map(str, idx))
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(numcodecs.Zstd(3).encode(raw))


def write_anndata_v3_table(tables, name, X, ttype):
    """The table as anndata (0.11 and later) writes it with zarr-python 3 (the layout of
    OME-NGFF 0.5 images' tables): X in chunks of 2 x 3, names in chunks of 4."""
    g = tables / name
    attrs = {"encoding-type": "anndata", "encoding-version": "0.1.0",
             "fractal_table_version": "1", "type": ttype}
    if ttype == "masking_roi_table":
        attrs.update({"region": {"path": "../labels/nuclei"}, "instance_key": "label"})
    v3_json(g, {"node_type": "group", "attributes": attrs})
    frame = {"_index": "_index", "encoding-type": "dataframe", "encoding-version": "0.2.0"}
    strings = {"encoding-type": "string-array", "encoding-version": "0.2.0"}
    v3_json(g / "var", {"node_type": "group", "attributes": {**frame, "column-order": []}})
    v3_array(g / "var" / "_index", np.array(COLS[:X.shape[1]], dtype=object), (4,), strings)
    obs_cols = ["label"] if ttype == "masking_roi_table" else []
    v3_json(g / "obs", {"node_type": "group", "attributes": {**frame, "column-order": obs_cols}})
    v3_array(g / "obs" / "_index",
             np.array([f"FOV_{i + 1}" for i in range(X.shape[0])], dtype=object), (4,), strings)
    if obs_cols:
        v3_array(g / "obs" / "label",
                 np.array([str(i + 1) for i in range(X.shape[0])], dtype=object), (2,), strings)
    v3_array(g / "X", X, (2, 3), {"encoding-type": "array", "encoding-version": "0.2.0"})


def make_tables(image):
    tables = zarr.open_group(str(image), mode="a").create_group("tables")
    X = fov_rows()
    write_anndata_table(tables, "FOV_ROI_table", X, "roi_table")
    write_anndata_table(tables, "nuclei_ROI_table", X[:, :6].copy(), "masking_roi_table",
                        multi_chunk=True)
    write_anndata_v3_table(image / "tables", "FOV_ROI_table_v3", X, "roi_table")
    write_anndata_v3_table(image / "tables", "nuclei_ROI_table_v3", X[:, :6].copy(),
                           "masking_roi_table")
    tables.attrs["tables"] = ["FOV_ROI_table", "nuclei_ROI_table", "well_ROI_table"]
    # ngio's CSV backend (float64 values)
    well = tables.create_group("well_ROI_table")
    well.attrs.update({"backend": "csv", "index_key": "FieldIndex", "index_type": "str",
                       "table_version": "1", "type": "roi_table"})
    df = pd.DataFrame(X.astype(np.float64), columns=COLS)
    df.index = pd.Index([f"FOV_{i + 1}" for i in range(len(df))], name="FieldIndex")
    df.to_csv(image / "tables" / "well_ROI_table" / "table.csv")


def fractal_boxes(X, shape, px_yx, pz=1.0, ftype=np.float32):
    """convert_ROI_table_to_indices as NumPy 2 computes it: in float32 for a float32 table
    (AnnData X), in float64 for a float64 one (a CSV table); then numpy slicing (clamping)."""
    out = []
    for r in X.astype(ftype):
        box = [(0, shape[0])]
        for pos, ln, p, dim in ((r[2], r[5], pz, shape[1]), (r[1], r[4], px_yx, shape[2]),
                                (r[0], r[3], px_yx, shape[3])):
            s = int(np.rint(ftype(pos) / ftype(p)))
            e = int(np.rint(ftype(ftype(pos) + ftype(ln)) / ftype(p)))
            box.append((min(s, dim), min(e, dim)))
        if all(a < b for a, b in box):
            out.append(box)
    return out


def ngio_boxes(X, shape, px_yx, pz=1.0):
    def snap(v):
        r = round(v)  # Python round: half to even
        return r if abs(r - v) < 0.01 else v

    out = []
    for r in X.astype(np.float64):
        box = [(0, shape[0])]
        for pos, ln, p, dim in ((r[2], r[5], pz, shape[1]), (r[1], r[4], px_yx, shape[2]),
                                (r[0], r[3], px_yx, shape[3])):
            s = snap(pos / p)
            e = s + snap(ln / p)
            box.append((max(0, min(math.floor(s), dim)), max(0, min(math.ceil(e), dim))))
        if all(a < b for a, b in box):
            out.append(box)
    return out


@pytest.fixture(scope="module")
def plate(tmp_path_factory):
    root = tmp_path_factory.mktemp("ome")
    image, data = make_plate(root)
    make_tables(image)
    return root, image, data


def expected(data, boxes):
    want = np.zeros(data.shape, data.dtype)
    for b in boxes:
        sl = tuple(slice(a, c) for a, c in b)
        want[sl] = data[sl] + 1
    return want


def task_ini(path, inp, level, table, rounding, cache, mask=None):
    write_config(path, {
        "input": {"path": inp, "level": level},
        "rois": {"table": table, "rounding": rounding, "mask": mask},
        "process": {"builtin": "add", "param.value": 1, "threads": 2},
        "output": {"chunks": "1,1,16,16"},
        "cache": {"dir": cache}})


CASES = [("FOV_ROI_table", "fractal"), ("FOV_ROI_table", "ngio"),
         ("nuclei_ROI_table", "fractal"), ("well_ROI_table", "fractal"),
         ("well_ROI_table", "ngio"), ("FOV_ROI_table_v3", "fractal"),
         ("nuclei_ROI_table_v3", "fractal")]


@pytest.mark.parametrize("table,rounding", CASES)
def test_table_rois_at_level_1(plate, tmp_path, roifs_bin, table, rounding):
    root, image, data = plate
    X = fov_rows()
    shape = level_shape(1)
    if rounding == "ngio":
        boxes = ngio_boxes(X, shape, PX0 * 2)
    else:
        ftype = np.float64 if table == "well_ROI_table" else np.float32
        boxes = fractal_boxes(X, shape, PX0 * 2, ftype=ftype)
    assert len(boxes) == 4
    if table.startswith("FOV_ROI_table") and rounding == "fractal":  # ties went to even
        assert boxes[1][2:] == [(4, 8), (2, 12)]
    if rounding == "ngio":
        assert boxes[1][2:] == [(3, 9), (2, 13)]
    cfg = tmp_path / "task.ini"
    mask = None
    want = expected(data[1], boxes)
    if table.startswith("nuclei"):  # a masking table: row i writes where the mask is i + 1
        labels = (np.arange(np.prod(shape)).reshape(shape) % 5).astype("<u2")
        mask = tmp_path / "nuclei.zarr"
        zarr.open(str(mask), mode="w", shape=shape, chunks=(1, 1, 16, 16), dtype="<u2")[...] = \
            labels
        want = data[1] * 0
        for i, b in enumerate(boxes):
            sl = tuple(slice(a, c) for a, c in b)
            want[sl] = np.where(labels[sl] == i + 1, data[1][sl] + 1, want[sl])
    task_ini(cfg, image, 1, image / "tables" / table, rounding, tmp_path / "cache", mask)
    r = run_roifs(roifs_bin, "check", cfg)
    assert r.returncode == 0, r.stderr
    assert f"(level 1: {image / '1'})" in r.stdout
    assert "rois:      4\n" in r.stdout
    assert "row 4 selects no element of the image; ignored" in r.stderr
    with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
        got = zarr.open(str(m.path), mode="r")[...]
    np.testing.assert_array_equal(got, want)


def test_array_path_in_image_group(plate, tmp_path, roifs_bin):
    """[input] path naming the level array itself: pixel size from its parent's multiscales."""
    root, image, data = plate
    cfg = tmp_path / "task.ini"
    task_ini(cfg, image / "2", None, image / "tables" / "FOV_ROI_table", "fractal",
             tmp_path / "cache")
    boxes = fractal_boxes(fov_rows(), level_shape(2), PX0 * 4)
    with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
        got = zarr.open(str(m.path), mode="r")[...]
        attrs = json.loads((m.path / ".zattrs").read_text())
    assert attrs["roifs"]["input"] == str(image / "2")
    np.testing.assert_array_equal(got, expected(data[2], boxes))


def test_group_with_roi_file(plate, tmp_path, roifs_bin):
    """An image group + level with an ordinary ROI list file."""
    root, image, data = plate
    image_level_task(tmp_path, image, 3, ":, 0:1, 0:10, 5:16")
    with mounted(roifs_bin, tmp_path / "task.ini", tmp_path / "mnt") as m:
        got = zarr.open(str(m.path), mode="r")[...]
    np.testing.assert_array_equal(got, expected(data[3], [[(0, 2), (0, 1), (0, 10), (5, 16)]]))


def bad(tmp_path, roifs_bin, sections, key):
    cfg = tmp_path / "task.ini"
    base = {"input": {}, "rois": {}, "process": {"builtin": "copy"},
            "cache": {"dir": tmp_path / "cache"}}
    for k, v in sections.items():
        base[k] = v
    write_config(cfg, base)
    r = run_roifs(roifs_bin, "check", cfg)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"roifs: {cfg}:{line_of(cfg, '^' + key)}: "), r.stderr
    return r.stderr


def test_errors(plate, tmp_path, roifs_bin):
    root, image, data = plate
    t = image / "tables"
    e = bad(tmp_path, roifs_bin, {"input": {"path": image, "level": 4},
                                  "rois": {"grid": "1,1,8,8"}}, "level")
    assert "out of range" in e
    e = bad(tmp_path, roifs_bin, {"input": {"path": image / "0", "level": 1},
                                  "rois": {"grid": "1,1,8,8"}}, "level")
    (tmp_path / "lone.zarr").mkdir()
    zarr.open(str(tmp_path / "lone.zarr"), mode="w", shape=(4, 4), dtype="u1")
    e = bad(tmp_path, roifs_bin, {"input": {"path": tmp_path / "lone.zarr"},
                                  "rois": {"table": t / "FOV_ROI_table"}}, "table")
    assert "pixel size is unknown" in e
    e = bad(tmp_path, roifs_bin, {"input": {"path": image},
                                  "rois": {"table": t / "missing"}}, "table")
    assert "[rois] table:" in e and "missing" in e
    broken = tmp_path / "broken"
    shutil.copytree(t / "well_ROI_table", broken)
    (broken / "table.csv").write_text("FieldIndex,x_micrometer\nA,1\n")
    e = bad(tmp_path, roifs_bin, {"input": {"path": image},
                                  "rois": {"table": broken}}, "table")
    assert "no column \"y_micrometer\"" in e


def test_v05_2d_image_with_global_scale(tmp_path, roifs_bin):
    """OME-NGFF 0.5 (zarr.json attributes.ome), a 2-D y,x image (z columns ignored), a
    multiscale-level scale multiplying the dataset scale, a CSV table, rounding = ngio."""
    img = tmp_path / "img.zarr"
    (img / "0" / "c" / "0").mkdir(parents=True)
    data = np.arange(12 * 10, dtype="<u2").reshape(12, 10)
    (img / "0" / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [12, 10], "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [12, 10]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["y", "x"], "attributes": {}}))
    (img / "0" / "c" / "0" / "0").write_bytes(data.tobytes())
    (img / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "group", "attributes": {"ome": {
            "version": "0.5", "multiscales": [{
                "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
                "datasets": [{"path": "0", "coordinateTransformations": [
                    {"type": "scale", "scale": [0.25, 0.25]}]}],
                "coordinateTransformations": [{"type": "scale", "scale": [2.0, 2.0]}]}]}}}))
    table = img / "tables" / "t"
    table.mkdir(parents=True)
    (table / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "group",
        "attributes": {"backend": "csv", "type": "roi_table", "table_version": "1"}}))
    # pixel 0.5 um: x 0.75 um = 1.5 px -> floor 1; len 1.2 um = 2.4 px -> stop ceil(3.9) = 4
    (table / "table.csv").write_text(
        "FieldIndex,x_micrometer,y_micrometer,z_micrometer,len_x_micrometer,"
        "len_y_micrometer,len_z_micrometer\nFOV_1,0.75,2.0,7.0,1.2,1.0,1.0\n")
    write_config(tmp_path / "task.ini", {
        "input": {"path": "img.zarr"},
        "rois": {"table": "img.zarr/tables/t", "rounding": "ngio"},
        "process": {"builtin": "add"},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, tmp_path / "task.ini", tmp_path / "mnt") as m:
        got = zarr.open(str(m.path), mode="r")[...]
    np.testing.assert_array_equal(got, expected(data, [[(4, 6), (1, 4)]]))
