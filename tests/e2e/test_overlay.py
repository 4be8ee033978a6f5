"""`[output] ome = labels` (docs/mounted-tree.md#ome-zarr-label-overlay): the mount presents the
input OME-Zarr image itself, every file byte for byte, plus labels/NAME (an OME-NGFF label image,
0.4 for Zarr v2, 0.5 for v3, as many levels as the parent, level k computed, the others nearest
neighbour of it) and the labels list with NAME added; with table_name, tables/NAME, a masking ROI
table of the result (AnnData or csv) whose first read computes the whole output once and whose rows
are then kept in the cache. Refusals: an input that is not an image group, a float output, a label
or table name the image already has."""
import contextlib
import errno
import json
import os
import shutil
import signal
import time
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
                   table=None, table_format=None, grid=GRID):
    out = {"ome": "labels", "dtype": "<u4"}
    if table:
        out["table_name"] = table
    if table_format:
        out["table_format"] = table_format
    out.update(output or {})
    return write_config(tmp_path / name, {
        "input": {"path": img, "level": level, "channel": channel},
        "rois": {"grid": ",".join(map(str, grid))},
        "process": {"builtin": "label", "param.value": THRESHOLD},
        "output": out,
        "cache": {"dir": tmp_path / "cache"}})


def expected_labels(data):
    """The builtin label over each grid ROI, as docs/configuration.md#builtin-processors defines
    it."""
    out = np.zeros(data.shape, "<u4")
    for i in range(0, data.shape[0], GRID[0]):
        for j in range(0, data.shape[1], GRID[1]):
            sl = (slice(i, i + GRID[0]), slice(j, j + GRID[1]))
            out[sl] = ndimage.label(data[sl] > THRESHOLD)[0]
    return out


def nearest(src, shape):
    """Element i of the result is element floor(i * E_src / E_dst) of src (docs/mounted-tree.md#ome-zarr-label-overlay)."""
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
        fuse = m.status()["fuse"]
        if fuse["passthrough"]:  # the input's files were read by the kernel, not through FUSE
            assert fuse["input_reads"] == 0, fuse
        else:
            assert fuse["input_reads"] > 0, fuse
        dest = tmp_path / "copy"
        subprocess.run(["cp", "-r", str(mnt), str(dest)], check=True, timeout=60)
        for rel in files_of(dest):
            if not rel.startswith(".roifs"):
                assert (dest / rel).read_bytes() == (mnt / rel).read_bytes(), rel
        assert sorted(files_of(dest)) == sorted(files_of(mnt))


def read_v3(path):
    """An uncompressed Zarr v3 array of the mount (bytes codec, "/" keys), assembled from its
    chunk files (Debian's zarr-python reads v2 only); missing chunks are the fill value."""
    meta = json.loads((path / "zarr.json").read_text())
    shape = meta["shape"]
    chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
    dt = np.dtype({"uint32": "<u4", "uint16": "<u2", "uint8": "u1"}[meta["data_type"]])
    out = np.full(shape, meta["fill_value"], dt)
    for idx in np.ndindex(*[-(-s // c) for s, c in zip(shape, chunks)]):
        p = path / "c" / "/".join(map(str, idx))
        if not p.exists():
            continue
        block = np.frombuffer(p.read_bytes(), dt).reshape(chunks)
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, shape))
        out[sl] = block[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def read_level(mnt, name, j, v3):
    path = mnt / "labels" / name / str(j)
    return read_v3(path) if v3 else zarr.open_array(str(path), mode="r")[...]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("k", [1, 2])
def test_computed_level_other_than_0(tmp_path, roifs_bin, version, k):
    """With [input] level = k the label image's level k is the computed array and every other
    level, finer and coarser, is its nearest neighbour (against numpy); reading every level
    calls the processor once per ROI of level k, and the other levels' ROIs are their
    chunks."""
    v3 = version == "0.5"
    img, levels = make_image(tmp_path, version)
    config = overlay_config(tmp_path, img, level=k)
    with mounted(roifs_bin, config) as m:
        want = expected_labels(levels[k])
        for j, data in enumerate(levels):
            got = read_level(m.path, "seg", j, v3)
            np.testing.assert_array_equal(got, nearest(want, data.shape[-2:]), f"level {j}")
        st = m.status()
        nrois = len(range(0, want.shape[0], GRID[0])) * len(range(0, want.shape[1], GRID[1]))
        assert st["rois"]["total"] == nrois
        assert st["rois"]["done"] == nrois
        assert st["calls"] == nrois
        assert [lv["level"] for lv in st["levels"]] == [k] + [j for j in range(3) if j != k]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_channel_axis(tmp_path, roifs_bin, version):
    """An image with a c axis, with [input] channel: the label image has the parent's axes
    without c, its shapes and transformations without c, and is computed from that channel;
    without channel the overlay is refused (a label image has no c axis)."""
    v3 = version == "0.5"
    img, levels = make_image(tmp_path, version, channels=3)
    refused = overlay_config(tmp_path, img, name="noc.ini", grid=(1,) + GRID)
    r = run_roifs(roifs_bin, "check", refused)
    assert r.returncode == 2 and "set [input] channel" in r.stderr, r.stderr
    config = overlay_config(tmp_path, img, channel=2)
    with mounted(roifs_bin, config) as m:
        ms, _ = label_multiscale(m.path, "seg", v3)
        assert [a["name"] for a in ms["axes"]] == ["y", "x"]
        assert ms["datasets"][1]["coordinateTransformations"] == [
            {"type": "scale", "scale": [1.0, 0.5]}, {"type": "translation",
                                                    "translation": [3.0, -2.0]}]
        assert not check_image(m.path / "labels" / "seg", strict=False)
        want = expected_labels(levels[0][2])
        for j, data in enumerate(levels):
            got = read_level(m.path, "seg", j, v3)
            np.testing.assert_array_equal(got, nearest(want, data.shape[-2:]), f"level {j}")


def test_refusals(tmp_path, roifs_bin):
    """Refused with exit status 2 and the key's line: an input that is not an OME-Zarr image
    group (one of its arrays, a plain array), a float output dtype, a label or a table name
    the image already has, a format other than the input's, ome = image's keys."""
    img, _ = make_image(tmp_path, "0.4")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cases = [
        (dict(img=img / "0"), "needs an OME-Zarr image group"),
        (dict(output={"dtype": "<f4"}), "label values are integers"),
        (dict(output={"label_name": "old"}), "already has a label 'old'"),
        (dict(table="FOV_ROI_table"), "already has a table 'FOV_ROI_table'"),
        (dict(output={"format": 3}), "whose format is 2"),
        (dict(output={"levels": 2}), "[output] levels cannot be used with ome = labels"),
    ]
    for i, (kw, message) in enumerate(cases):
        config = overlay_config(tmp_path, kw.pop("img", img), name=f"bad{i}.ini", **kw)
        for argv in (["check", config], ["mount", config, mnt]):
            r = run_roifs(roifs_bin, *argv)
            assert r.returncode == 2, (argv, kw, r.stderr)
            assert message in r.stderr and f"bad{i}.ini:" in r.stderr, (argv, kw, r.stderr)
            assert not os.path.ismount(mnt)


COLUMNS = ["x_micrometer", "y_micrometer", "z_micrometer",
           "len_x_micrometer", "len_y_micrometer", "len_z_micrometer"]


def table_reference(labels, scale, translation):
    """The rows of the masking table (docs/mounted-tree.md#ome-zarr-label-overlay) from a label array (y, x): sorted labels and, per label, its
    bounding box (x, y, z, len_x, len_y, len_z) in micrometres, no z axis: z 0, length 1."""
    ids, boxes = [], []
    for i, sl in enumerate(ndimage.find_objects(labels), start=1):
        if sl is None:
            continue
        ys, xs = sl
        ids.append(i)
        boxes.append([translation[1] + xs.start * scale[1], translation[0] + ys.start * scale[0],
                      0.0, (xs.stop - xs.start) * scale[1], (ys.stop - ys.start) * scale[0],
                      1.0])
    return np.array(ids, np.int64), np.array(boxes, np.float64).reshape(len(ids), 6)


def read_table(path, backend):
    """(labels, X) of a mounted masking table, by anndata or by pandas."""
    if backend == "anndata":
        import anndata
        a = anndata.read_zarr(str(path))
        assert list(a.var_names) == COLUMNS
        assert [str(v) for v in a.obs["label"]] == list(a.obs_names)
        return a.obs["label"].to_numpy(), np.asarray(a.X, np.float64)
    import pandas as pd
    df = pd.read_csv(path / "table.csv", float_precision="round_trip")
    assert list(df.columns) == ["label"] + COLUMNS
    return df["label"].to_numpy(), df[COLUMNS].to_numpy(np.float64)


def table_attrs(path, v3):
    return attrs_of(path, v3)


@pytest.mark.parametrize("backend", ["anndata", "csv"])
@pytest.mark.parametrize("k", [0, 1])
def test_table_rows(tmp_path, roifs_bin, backend, k):
    """tables/NAME has one row per label id of the output, its bounding box in micrometres
    from the computed level's scale and translation, and the masking table attributes; its
    first read computes the whole output (every ROI once) and scans it once; reading its
    other files scans nothing more."""
    img, levels = make_image(tmp_path, "0.4")
    config = overlay_config(tmp_path, img, level=k, table="seg_table", table_format=backend)
    with mounted(roifs_bin, config) as m:
        st = m.status()
        assert st["calls"] == 0 and st["table"] == {"scans": 0, "from_record": 0}
        path = m.path / "tables" / "seg_table"
        attrs = table_attrs(path, False)
        st = m.status()
        nrois = st["rois"]["total"]
        assert st["calls"] == nrois and st["table"]["scans"] == 1
        assert {k2: attrs[k2] for k2 in ("type", "table_version", "region", "instance_key",
                                         "index_key")} == {
            "type": "masking_roi_table", "table_version": "1",
            "region": {"path": "../labels/seg"}, "instance_key": "label", "index_key": "label"}
        labels, x = read_table(path, backend)
        want_ids, want_x = table_reference(expected_labels(levels[k]),
                                           [0.5 * 2 ** k, 0.25 * 2 ** k], [3.0, -2.0])
        assert len(want_ids) > 5
        np.testing.assert_array_equal(labels, want_ids)
        np.testing.assert_allclose(x, want_x, rtol=1e-6)
        for rel in files_of(path):
            (path / rel).read_bytes()
        st = m.status()
        assert st["calls"] == nrois and st["table"]["scans"] == 1


def chained_on_table(tmp_path, roifs_bin, m, table, nrois):
    """step2.ini: a second job over mount m's level 0 whose [rois] table is m's masking table
    `table` (ngio's chain), adding 1 in each ROI; `roifs check` must count nrois ROIs."""
    step2 = write_config(tmp_path / "step2.ini", {
        "input": {"path": m.path, "level": 0},
        "rois": {"table": table},
        "process": {"builtin": "add", "param.value": 1},
        "output": {"format": 2},
        "cache": {"dir": tmp_path / "cache2"}})
    r = run_roifs(roifs_bin, "check", step2)
    assert r.returncode == 0, r.stderr
    assert f"rois:      {nrois}\n" in r.stdout, r.stdout
    return step2


def test_v3_anndata_table_is_a_second_mounts_rois(tmp_path, roifs_bin):
    """OME-NGFF 0.5 chained as ngio chains it: the masking table a mount writes as AnnData on
    Zarr v3 (table_format = anndata) is the [rois] table of a second mount over the first;
    one masked ROI per label id, its mask the first mount's labels (region.path), so the
    second mount writes input + 1 on every labelled pixel and nothing elsewhere."""
    img, levels = make_image(tmp_path, "0.5", translation=False)
    config = overlay_config(tmp_path, img, table="seg_table", table_format="anndata")
    want = expected_labels(levels[0])
    ids = np.unique(want[want > 0])
    with mounted(roifs_bin, config) as m:
        table = m.path / "tables" / "seg_table"
        assert json.loads((table / "var" / "_index" / "zarr.json").read_text())[
            "data_type"] == "string"
        step2 = chained_on_table(tmp_path, roifs_bin, m, table, len(ids))
        with mounted(roifs_bin, step2, tmp_path / "mnt2") as m2:
            got = zarr.open_array(str(m2.path), mode="r")[...]
            assert m2.status()["calls"] == len(ids)
    np.testing.assert_array_equal(got, np.where(want > 0, levels[0] + 1, 0))


def wait_for(cond, what, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_input_changes_while_mounted_are_seen(tmp_path, roifs_bin):
    """The input image is read through as it is at each look, not as it was at mount: a file,
    a table and a label group added to the input while mounted are listed and read through
    within the kernel's second (LIVE_TIMEOUT, misses included), and a file removed is gone;
    the overlay's labels list follows the input's (with its own name added); the overlay's own
    nodes stay its own (labels/seg even when the input gets a labels/seg, .roifs); no name is
    listed twice."""
    img, levels = make_image(tmp_path, "0.4")
    config = overlay_config(tmp_path, img, table="seg_table")
    with mounted(roifs_bin, config) as m:
        # looked up first, so that the kernel holds their absence
        assert not (m.path / "notes.txt").exists()
        assert not (m.path / "tables" / "new_table").exists()
        labels_list = (m.path / "labels" / ".zattrs").read_bytes()
        seg_files = sorted(os.listdir(m.path / "labels" / "seg"))
        (img / "notes.txt").write_text("hello")
        (img / "tables" / "new_table").mkdir()
        (img / "tables" / "new_table" / ".zattrs").write_text('{"type": "roi_table"}')
        (img / "labels" / "other").mkdir()
        (img / "labels" / "other" / ".zgroup").write_text('{"zarr_format": 2}')
        (img / "labels" / "seg").mkdir()  # the overlay's own group: not the input's
        (img / "labels" / "seg" / "extra.txt").write_text("not shown")
        (img / ".roifs").mkdir()  # as a chained mount's status would be: not shown
        (img / ".roifs" / "stale").write_text("{}")
        wait_for(lambda: (m.path / "notes.txt").exists(), "an added file never appeared")
        assert (m.path / "notes.txt").read_text() == "hello"
        wait_for(lambda: (m.path / "tables" / "new_table").exists(), "no new table")
        assert json.loads((m.path / "tables" / "new_table" / ".zattrs").read_text()) == {
            "type": "roi_table"}
        assert "other" in os.listdir(m.path / "labels")
        assert (m.path / "labels" / "other" / ".zgroup").read_text() == '{"zarr_format": 2}'
        for d in ("", "labels", "tables", "labels/seg"):
            names = os.listdir(m.path / d)
            assert len(names) == len(set(names)), (d, names)
        assert (m.path / "labels" / ".zattrs").read_bytes() == labels_list
        # the overlay's list follows the input's: its labels, then the overlay's own
        assert json.loads(labels_list)["labels"] == ["old", "seg"]
        (img / "labels" / ".zattrs").write_text(json.dumps({"labels": ["old", "other"],
                                                            "note": "kept"}))
        wait_for(lambda: json.loads((m.path / "labels" / ".zattrs").read_text())["labels"] ==
                 ["old", "other", "seg"], "the labels list did not follow the input's")
        assert json.loads((m.path / "labels" / ".zattrs").read_text())["note"] == "kept"
        assert os.stat(m.path / "labels" / ".zattrs").st_size == \
            len((m.path / "labels" / ".zattrs").read_bytes())
        assert sorted(os.listdir(m.path / "labels" / "seg")) == seg_files
        assert not (m.path / "labels" / "seg" / "extra.txt").exists()
        assert os.listdir(m.path / ".roifs") == ["status"]
        assert "calls" in m.status()
        (img / "notes.txt").unlink()
        wait_for(lambda: not (m.path / "notes.txt").exists(), "a removed file stayed")
        assert "notes.txt" not in os.listdir(m.path)
        np.testing.assert_array_equal(read_level(m.path, "seg", 0, False),
                                      expected_labels(levels[0]))


def test_input_names_are_kept_only_while_the_kernel_holds_them(tmp_path, roifs_bin):
    """The names of the input read through are kept while the kernel holds their inodes, not
    for the life of the mount: 3,000 files of the input looked at through the overlay are
    held (status fuse.input_names), and once they are deleted and the kernel drops its
    dentries and inodes (drop_caches 2: its FORGETs) they are let go; the mount serves on."""
    img, levels = make_image(tmp_path, "0.4")
    many = img / "many"
    many.mkdir()
    for i in range(3000):
        (many / f"f{i:04d}").write_bytes(b"x")
    config = overlay_config(tmp_path, img)
    with mounted(roifs_bin, config) as m:
        names = os.listdir(m.path / "many")
        assert len(names) == 3000
        for name in names:
            os.stat(m.path / "many" / name)
        assert m.status()["fuse"]["input_names"] >= 3000
        shutil.rmtree(many)
        time.sleep(1.2)  # the kernel's second on the input's names
        assert "many" not in os.listdir(m.path)

        def let_go():
            Path("/proc/sys/vm/drop_caches").write_text("2")
            return m.status()["fuse"]["input_names"] < 100
        wait_for(let_go, "the names of deleted files are still held", timeout=10)
        np.testing.assert_array_equal(read_level(m.path, "seg", 0, False),
                                      expected_labels(levels[0]))


def test_fifo_swapped_into_the_input_fails_fast(tmp_path, roifs_bin):
    """A file of the input looked up through the overlay and then replaced by a FIFO (anyone
    who can write into the image can): its open through the mount, while the kernel still
    holds the file's entry, fails at once (ENOENT: the name is looked up again and a FIFO is
    never shown; ESTALE if the kernel does not retry) instead of waiting in the daemon for a
    writer; the reader stays killable, other reads go on, the FIFO is not listed, and the
    mount unmounts."""
    img, levels = make_image(tmp_path, "0.4")
    (img / "data.txt").write_text("data")
    config = overlay_config(tmp_path, img)
    with mounted(roifs_bin, config) as m:
        fifo = img / "data.txt"
        reader = None
        try:
            assert (m.path / "data.txt").stat().st_size == 4  # the kernel holds it for 1 s
            fifo.unlink()
            os.mkfifo(fifo)
            reader = subprocess.Popen(
                ["/usr/bin/python3", "-c",
                 "import sys\ntry:\n open(sys.argv[1], 'rb').read()\n"
                 "except OSError as e:\n sys.exit(e.errno)\nsys.exit(0)",
                 str(m.path / "data.txt")])
            try:
                code = reader.wait(timeout=5)
            except subprocess.TimeoutExpired:
                reader.kill()
                try:
                    reader.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pytest.fail("the open of a FIFO swapped into the input hung, unkillable")
                pytest.fail("the open of a FIFO swapped into the input hung")
            assert code in (errno.ENOENT, errno.ESTALE), code
            np.testing.assert_array_equal(read_level(m.path, "seg", 0, False),
                                          expected_labels(levels[0]))
            assert "data.txt" not in os.listdir(m.path)
        finally:
            # on failure: a writer lets a daemon thread stuck in open() go, so the mount can
            # be unmounted
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            if reader and reader.poll() is None:
                reader.kill()
                reader.wait(timeout=10)


def test_interleaved_listings_skip_no_name(tmp_path, roifs_bin):
    """Two listings of one directory of the input at once, files deleted between: the first
    listing (paused after its first getdents), resumed after a second whole listing, lists
    every name that was there throughout (each open directory goes on from its own names,
    not from a snapshot another listing replaced), and none twice; the same steps on ext4
    skip none either."""
    img, levels = make_image(tmp_path, "0.4")
    many = img / "many"
    many.mkdir()
    names = [f"f{i:04d}" for i in range(1700)]
    for name in names:
        (many / name).write_bytes(b"x")
    gone = set(names[0:600:2])  # 300 names, before and after where the first listing is
    config = overlay_config(tmp_path, img)
    with mounted(roifs_bin, config) as m:
        first = os.scandir(m.path / "many")
        try:
            seen = [next(first).name]  # one getdents: a page of names read
            for name in gone:
                (many / name).unlink()
            assert len(os.listdir(m.path / "many")) == 1400  # the second listing, whole
            seen += [e.name for e in first]
        finally:
            first.close()
        assert len(seen) == len(set(seen)), "a name listed twice"
        missed = sorted(set(names) - gone - set(seen))
        assert not missed, f"{len(missed)} names there throughout were skipped: {missed[:5]}"
        assert sorted(os.listdir(m.path / "many")) == sorted(set(names) - gone)


def test_table_record_and_sizes(tmp_path, roifs_bin):
    """Before the table is computed its files show an upper bound of their size (no blocks),
    after it the exact one; a remount of the same result reads the rows from the cache's
    record (no scan, no call), and a damaged record is computed again."""
    img, levels = make_image(tmp_path, "0.5")
    config = overlay_config(tmp_path, img, table="seg_table", table_format="csv")
    csv = Path("tables/seg_table/table.csv")
    with mounted(roifs_bin, config) as m:
        before = os.stat(m.path / csv)
        assert before.st_blocks == 0
        text = (m.path / csv).read_bytes()
        assert before.st_size >= len(text) > 100
        assert os.stat(m.path / csv).st_size == len(text)
        assert m.status()["table"]["scans"] == 1
    records = list((tmp_path / "cache").glob("table-*.rows"))
    assert len(records) == 1
    with mounted(roifs_bin, config) as m:
        assert (m.path / csv).read_bytes() == text
        st = m.status()
        assert st["table"] == {"scans": 0, "from_record": 1} and st["calls"] == 0
    data = bytearray(records[0].read_bytes())
    data[40] ^= 1
    records[0].write_bytes(bytes(data))
    with mounted(roifs_bin, config) as m:
        assert (m.path / csv).read_bytes() == text
        assert m.status()["table"] == {"scans": 1, "from_record": 0}


@pytest.mark.parametrize("backend", ["anndata", "csv"])
def test_table_follows_input_changes_while_mounted(tmp_path, roifs_bin, backend):
    """The masking table follows the label image as it is now, not as it was when first read:
    after the input image changed while mounted (objects removed and added), reading
    tables/NAME again without a remount gives the rows of the new label image (once one of
    its files is opened, every file's size at stat is the new one within a second), and a second mount chained on it ([rois] table)
    gets the ROIs of the objects that exist now; the old rows come back when the old input
    does."""
    img, levels = make_image(tmp_path, "0.4", translation=False)
    config = overlay_config(tmp_path, img, table="seg_table", table_format=backend)
    scale, translation = [0.5, 0.25], [0.0, 0.0]
    old = expected_labels(levels[0])
    new_data = levels[0].copy()
    new_data[:26] = 0                 # the objects of the top half removed
    new_data[30:40, 4:12] = 999       # and new ones added below
    new_data[44:50, 20:40] = 999
    new = expected_labels(new_data)
    old_ids, old_x = table_reference(old, scale, translation)
    new_ids, new_x = table_reference(new, scale, translation)
    assert not np.array_equal(old_x.shape, new_x.shape) or not np.allclose(old_x, new_x)
    with mounted(roifs_bin, config) as m:
        path = m.path / "tables" / "seg_table"
        ids, x = read_table(path, backend)
        np.testing.assert_array_equal(ids, old_ids)
        np.testing.assert_allclose(x, old_x, rtol=1e-6)
        assert m.status()["table"]["scans"] == 1
        sizes = {rel: os.stat(path / rel).st_size for rel in files_of(path)}
        z = zarr.open_array(str(img / "0"), mode="r+")
        z[...] = new_data
        np.testing.assert_array_equal(read_level(m.path, "seg", 0, False), new)
        # one file opened makes the table again; within the kernel's second every file's
        # size is the new table's, whether opened yet or not
        (path / sorted(sizes)[0]).read_bytes()
        time.sleep(1.2)
        now = {rel: os.stat(path / rel).st_size for rel in files_of(path)}
        assert now != sizes
        assert now == {rel: len((path / rel).read_bytes()) for rel in now}
        ids, x = read_table(path, backend)
        np.testing.assert_array_equal(ids, new_ids)
        np.testing.assert_allclose(x, new_x, rtol=1e-6)
        assert m.status()["table"]["scans"] == 2
        for rel in files_of(path):
            data = (path / rel).read_bytes()
            assert os.stat(path / rel).st_size == len(data), rel
        if backend == "anndata":  # ngio's chain: a second mount's ROIs are these rows
            step2 = chained_on_table(tmp_path, roifs_bin, m, path, len(new_ids))
            with mounted(roifs_bin, step2, tmp_path / "mnt2") as m2:
                assert m2.status()["rois"]["total"] == len(new_ids)
        z[...] = levels[0]  # back as it was (files written again): the old rows
        ids, x = read_table(path, backend)
        np.testing.assert_array_equal(ids, old_ids)
        np.testing.assert_allclose(x, old_x, rtol=1e-6)
        # results are named by the input's content: the label image is the first one again,
        # so its table comes from the record made of it, without a scan
        assert m.status()["table"] == {"scans": 2, "from_record": 1}


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_export_into(tmp_path, roifs_bin, version):
    """A plain export (to DEST) of an overlay is refused (exit 2): it would not copy the input.
    roifs export --into IMAGE CONFIG writes labels/NAME and tables/NAME into IMAGE (a copy
    of the input) and adds them to its lists (other content kept); read back by zarr-python
    and anndata (v2) or as files (v3); a second run is refused (exit 2) and --overwrite
    replaces them, each listed once."""
    v3 = version == "0.5"
    img, levels = make_image(tmp_path, version)
    image = tmp_path / "copy.zarr"
    shutil.copytree(img, image)
    backend = "csv" if v3 else "anndata"
    config = overlay_config(tmp_path, img, level=1, table="seg_table", table_format=backend)
    r = run_roifs(roifs_bin, "export", config, tmp_path / "dest")
    assert r.returncode == 2 and "export with --into IMAGE" in r.stderr, r.stderr
    r = run_roifs(roifs_bin, "export", "--into", image, config, timeout=120)
    assert r.returncode == 0, r.stderr
    labels = attrs_of(image / "labels", v3)
    assert (labels["ome"]["labels"] if v3 else labels["labels"]) == ["old", "seg"]
    assert labels["note"] == "kept"
    assert attrs_of(image / "tables", v3)["tables"] == ["FOV_ROI_table", "seg_table"]
    want = expected_labels(levels[1])
    for j, data in enumerate(levels):
        np.testing.assert_array_equal(read_level(image, "seg", j, v3),
                                      nearest(want, data.shape[-2:]), f"level {j}")
    assert not check_image(image / "labels" / "seg", strict=False)
    ids, x = read_table(image / "tables" / "seg_table", backend)
    want_ids, want_x = table_reference(want, [1.0, 0.5], [3.0, -2.0])
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(x, want_x, rtol=1e-6)
    assert not [p for p in image.rglob(".roifs-*")]
    before = {rel: (image / rel).read_bytes() for rel in files_of(image)}
    r = run_roifs(roifs_bin, "export", "--into", image, config, timeout=120)
    assert r.returncode == 2 and "already has a label 'seg'" in r.stderr, r.stderr
    assert {rel: (image / rel).read_bytes() for rel in files_of(image)} == before
    r = run_roifs(roifs_bin, "export", "--into", image, "--overwrite", config, timeout=120)
    assert r.returncode == 0, r.stderr
    assert {rel: (image / rel).read_bytes() for rel in files_of(image)} == before


def test_export_into_killed(tmp_path, roifs_bin):
    """A kill -9 during export --into leaves IMAGE's lists and groups as they were (the new
    groups are written under hidden temporary names and the lists replaced last); the next
    run removes the leftovers and completes."""
    img, levels = make_image(tmp_path, "0.4")
    config = overlay_config(tmp_path, img, table="seg_table")
    text = config.read_text().replace("[process]\n", "[process]\nparam.delay = 0.4\nthreads = 1\n")
    config.write_text(text)
    before = {rel: (img / rel).read_bytes() for rel in files_of(img)}
    proc = subprocess.Popen([roifs_bin, "export", "--into", str(img), str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not list((img / "labels").glob(".roifs-tmp.seg.*/*/*")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    after = {rel: (img / rel).read_bytes() for rel in files_of(img) if "/.roifs-tmp." not in rel}
    assert after == before
    assert not (img / "labels" / "seg").exists()
    r = run_roifs(roifs_bin, "export", "--into", img, config, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not [p for p in img.rglob(".roifs-*")]
    assert attrs_of(img / "labels", False)["labels"] == ["old", "seg"]
    np.testing.assert_array_equal(read_level(img, "seg", 0, False), expected_labels(levels[0]))


def test_clean_unused_visits_the_label_levels(tmp_path, roifs_bin):
    """`roifs clean --unused` collects the cache of every level of the label image, not only
    the computed one's: after the input changed, the results of the old input's levels are
    removed, and what is current stays (a remount reads every level computing nothing); so
    are the masking table's records of the old label image, the current one kept."""
    img, levels = make_image(tmp_path, "0.4")
    config = overlay_config(tmp_path, img, table="seg_table", table_format="csv")
    table = Path("tables/seg_table/table.csv")
    with mounted(roifs_bin, config) as m:
        for j in range(len(levels)):
            read_level(m.path, "seg", j, False)
        (m.path / table).read_bytes()
        nrois = m.status()["calls"]
    z = zarr.open_array(str(img / "0"), mode="r+")
    new = (z[...] + 500).astype("<u2")  # every pixel changed: every label differs
    z[...] = new
    with mounted(roifs_bin, config) as m:
        for j in range(len(levels)):
            read_level(m.path, "seg", j, False)
        text = (m.path / table).read_bytes()
        assert m.status()["calls"] == nrois
    assert len(list((tmp_path / "cache").glob("table-*.rows"))) == 2
    level_rois = sum(-(-d.shape[0] // 20) * -(-d.shape[1] // 16) for d in levels[1:])  # chunks
    r = run_roifs(roifs_bin, "clean", "--unused", config)
    assert r.returncode == 0, r.stderr
    removed = int(r.stdout.split("results: ")[1].split()[0])
    # level 0's old results, and those of levels 1 and 2 (one ROI per chunk of each level)
    assert removed >= nrois + level_rois, r.stdout
    assert "tables:  1 records of earlier label images removed" in r.stdout, r.stdout
    assert len(list((tmp_path / "cache").glob("table-*.rows"))) == 1
    with mounted(roifs_bin, config) as m:
        want = expected_labels(new)
        for j, data in enumerate(levels):
            np.testing.assert_array_equal(read_level(m.path, "seg", j, False),
                                          nearest(want, data.shape[-2:]), f"level {j}")
        assert (m.path / table).read_bytes() == text
        assert m.status()["calls"] == 0
        assert m.status()["table"] == {"scans": 0, "from_record": 1}
    r = run_roifs(roifs_bin, "clean", "--unused", config)
    assert r.returncode == 0 and "results: 0 removed" in r.stdout, r.stdout
    assert "tables:  0 records" in r.stdout, r.stdout
