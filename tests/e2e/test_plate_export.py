"""`roifs export --into PLATE` of an `ome = labels` plate (docs/plates.md): every selected
image's labels/NAME and tables/NAME and the plate's tables/NAME, written as the mount presents
them, staged first and renamed into place only when every image's are complete."""
import shutil

import anndata
import pandas as pd
import pytest
import zarr

from conftest import mounted, run_roifs, write_config
from test_measure import check_table
from test_measure_input import add_labels
from test_overlay import files_of
from test_plate import added_files, attrs, make_plate, plate_config, validate, without_provenance
from test_plate_measure import measure_config


def snapshot(root):
    return {f: (root / f).read_bytes() for f in files_of(root)}


def refused_then_overwritten(roifs_bin, dest, config, taken, same=True):
    """export --into dest again: refused (exit 2, the message naming the taken name) with
    nothing written; then with --overwrite, written again: the same files (and with same, the
    same bytes)."""
    before = snapshot(dest)
    r = run_roifs(roifs_bin, "export", "--into", dest, config, timeout=60)
    assert r.returncode == 2 and taken in r.stderr, r.stderr
    assert snapshot(dest) == before
    r = run_roifs(roifs_bin, "export", "--into", dest, "--overwrite", config, timeout=60)
    assert r.returncode == 0, r.stderr
    after = snapshot(dest)
    assert after == before if same else sorted(after) == sorted(before)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_export_into_plate_writes_what_the_mount_presents(tmp_path, roifs_bin, version):
    """Into a copy of a Fractal-style plate: each image's labels/seg and tables/seg_table and
    the plate's tables/seg_table as the mount presents them (but the provenance), the lists
    naming them, valid against the official schemas; a second export refuses the taken names
    (exit 2, nothing written) and --overwrite writes them again."""
    plate, images = make_plate(tmp_path, version, "fractal")
    dest = tmp_path / "dest.zarr"
    shutil.copytree(plate, dest)
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    r = run_roifs(roifs_bin, "export", "-j", "2", "--into", dest, config, timeout=90)
    assert r.returncode == 0, r.stderr
    with mounted(roifs_bin, config) as m:
        for p in images:
            want = {f: (m.path / p / f).read_bytes() for f in added_files(m.path / p)}
            got = {f: (dest / p / f).read_bytes() for f in added_files(dest / p)}
            assert sorted(got) == sorted(want) and any("tables/" in f for f in got), p
            for f in want:
                assert without_provenance(got[f], f) == without_provenance(want[f], f), (p, f)
            for g in ("labels", "tables"):
                assert attrs(dest / p / g, version) == attrs(m.path / p / g, version), (p, g)
            validate(attrs(dest / p / "labels/seg", version), version, "label")
        mine = m.path / "tables/seg_table"
        want = {f: (mine / f).read_bytes() for f in files_of(mine)}
        assert want and snapshot(dest / "tables/seg_table") == want
        assert attrs(dest / "tables", version) == attrs(m.path / "tables", version)
    validate(attrs(dest, version), version, "plate")
    if version == "0.4":
        import zarr
        for p in images:
            z = zarr.open_group(str(dest / p / "labels/seg"), mode="r")
            assert z["0"].shape[-2:] == zarr.open(str(dest / p / "0"), mode="r").shape[-2:]
            assert z["0"][:].max() > 0, p
    refused_then_overwritten(roifs_bin, dest, config, "already has a label 'seg'")


@pytest.mark.timeout(120)
def test_export_into_plate_failing_image_leaves_every_image_as_it_was(tmp_path, roifs_bin):
    """An image whose input chunk is corrupt (its ROIs fail) fails the export (exit 1, the
    reason said): the images staged before it get nothing either (no label, no table, no list
    changed, no temporary left), nor does the plate; with --wells narrowed to the good images,
    the same plate gets theirs and the plate table over them. A PLATE missing an image, and an
    ome = true plate, are refused (exit 2) with nothing written."""
    plate, images = make_plate(tmp_path, "0.4", "fractal")
    bad = images["C/05/0"] / "0"
    chunk = next(f for f in sorted(bad.iterdir()) if not f.name.startswith("."))
    chunk.write_bytes(b"xyz")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    other = tmp_path / "other.zarr"  # not the same layout: an image missing
    shutil.copytree(plate, other)
    shutil.rmtree(other / "B/03/1")
    kept = snapshot(other)
    r = run_roifs(roifs_bin, "export", "--into", other, config, timeout=60)
    assert r.returncode == 2 and "B/03/1" in r.stderr, r.stderr
    assert snapshot(other) == kept
    new = tmp_path / "new.ini"
    new.write_text(config.read_text().replace("ome = labels", "ome = true"))
    r = run_roifs(roifs_bin, "export", "--into", other, new, timeout=60)
    assert r.returncode == 2 and "ome = labels" in r.stderr, r.stderr
    before = snapshot(plate)
    r = run_roifs(roifs_bin, "export", "--into", plate, config, timeout=90)
    assert r.returncode == 1 and "C/05/0" in r.stderr, r.stderr
    assert snapshot(plate) == before
    assert not [d for d in plate.rglob(".roifs-*")], list(plate.rglob(".roifs-*"))
    r = run_roifs(roifs_bin, "export", "--wells", "B/03", "--into", plate, config, timeout=90)
    assert r.returncode == 0, r.stderr
    for p in ("B/03/0", "B/03/1"):
        assert (plate / p / "labels/seg/.zattrs").is_file()
        assert (plate / p / "tables/seg_table").is_dir()
    assert not (plate / "C/05/0/labels/seg").exists()
    assert (plate / "tables/seg_table").is_dir()
    assert attrs(plate / "tables", "0.4")["tables"] == ["seg_table"]


def table_files(root):
    """A table group's files: {relative path: bytes}."""
    return {f: (root / f).read_bytes() for f in files_of(root)}


def same_table(got, want, fmt, rel):
    """Two copies of a feature table (an image's or the plate's) hold the same files and rows:
    their metadata equal but the provenance, their rows equal as anndata or pandas reads them
    (the values to 1e-12: partials merged in another order may differ in the last bits)."""
    a, b = table_files(got), table_files(want)
    assert sorted(a) == sorted(b) and b, (rel, sorted(a), sorted(b))
    for f in b:
        if f.endswith((".zattrs", "zarr.json", ".zgroup", ".zarray")):
            assert without_provenance(a[f], f) == without_provenance(b[f], f), (rel, f)
    if fmt == "csv":
        x, y = pd.read_csv(got / "table.csv"), pd.read_csv(want / "table.csv")
    else:
        ga, wa = anndata.read_zarr(str(got)), anndata.read_zarr(str(want))
        assert list(ga.obs_names) == list(wa.obs_names) and list(ga.var_names) == list(wa.var_names)
        pd.testing.assert_frame_equal(ga.obs, wa.obs)
        x, y = pd.DataFrame(ga.X), pd.DataFrame(wa.X)
    assert len(y) > 0, rel
    pd.testing.assert_frame_equal(x, y, check_dtype=False, rtol=1e-12)


def mount_copy(m, rel):
    """The mount's rel (a directory) copied out as it is presented."""
    return {f: (m.path / rel / f).read_bytes() for f in files_of(m.path / rel)}


def write_out(files, root):
    for f, data in files.items():
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_bytes(data)
    return root


@pytest.mark.timeout(150)
@pytest.mark.parametrize("version,fmt,mask", [("0.4", "anndata", True), ("0.5", "csv", False)])
def test_export_into_plate_of_measured_labels(tmp_path, roifs_bin, version, fmt, mask):
    """[measure] of the computed labels (with mask, [output] table_name = seg_table too: the
    masking table beside the feature table): into a copy of the plate, every image's
    labels/seg, tables/feat (and tables/seg_table) and the plate's tables/feat as the mount
    presents them, the lists naming them as the mount's do, valid against the schemas; the
    masking table's name taken in one image, and a second export, refused with nothing
    written, --overwrite writes them again; --wells B/03 into another copy writes those
    images' and the plate's table of their rows. On main the masking table's form was refused
    (exit 2)."""
    plate, images = make_plate(tmp_path, version, "fractal", channels=2)
    dest = tmp_path / "dest.zarr"
    shutil.copytree(plate, dest)
    config = measure_config(tmp_path / "p.ini", plate, tmp_path / "cache", fmt)
    if mask:
        config.write_text(config.read_text().replace("label_name = seg",
                                                      "label_name = seg\ntable_name = seg_table"))
    names = ["feat", "seg_table"] if mask else ["feat"]
    if mask:  # one image has a masking table of that name: refused, nothing written
        (dest / "C/05/0/tables/seg_table").mkdir()
        kept = snapshot(dest)
        r = run_roifs(roifs_bin, "export", "--into", dest, config, timeout=60)
        assert r.returncode == 2 and "already has a table 'seg_table'" in r.stderr, r.stderr
        assert snapshot(dest) == kept and not list(dest.rglob(".roifs-*"))
        (dest / "C/05/0/tables/seg_table").rmdir()
    r = run_roifs(roifs_bin, "export", "-j", "2", "--into", dest, config, timeout=100)
    assert r.returncode == 0, r.stderr
    with mounted(roifs_bin, config) as m:
        for p in images:
            want = {f: (m.path / p / f).read_bytes() for f in files_of(m.path / p)
                    if f.startswith("labels/seg/")}
            got = {f: (dest / p / f).read_bytes() for f in files_of(dest / p)
                   if f.startswith("labels/seg/")}
            assert sorted(got) == sorted(want) and want, p
            for f in want:
                assert without_provenance(got[f], f) == without_provenance(want[f], f), (p, f)
            for g in ("labels", "tables"):
                assert attrs(dest / p / g, version) == attrs(m.path / p / g, version), (p, g)
            assert attrs(dest / p / "tables", version)["tables"][-len(names):] == names, p
            for n in names:
                t = f"{p}/tables/{n}"
                same_table(dest / t, write_out(mount_copy(m, t), tmp_path / "m" / t),
                           fmt if n == "feat" else "anndata", t)
            validate(attrs(dest / p / "labels/seg", version), version, "label")
            validate(attrs(dest / p, version), version, "image")
        assert not (m.path / "tables/seg_table").exists()
        mine = write_out(mount_copy(m, "tables/feat"), tmp_path / "m/tables/feat")
        same_table(dest / "tables/feat", mine, fmt, "tables/feat")
        assert attrs(dest / "tables", version) == attrs(m.path / "tables", version)
    assert attrs(dest / "tables", version)["tables"] == ["feat"]
    assert attrs(dest / "tables/feat", version)["type"] == "feature_table"
    validate(attrs(dest, version), version, "plate")
    assert not list(dest.rglob(".roifs-*"))
    refused_then_overwritten(roifs_bin, dest, config, "already has a label 'seg'", same=False)
    # --wells B/03 into another copy: its two images' additions, the plate's table of their rows
    narrow = tmp_path / "narrow.zarr"
    shutil.copytree(plate, narrow)
    r = run_roifs(roifs_bin, "export", "--wells", "B/03", "--into", narrow, config, timeout=60)
    assert r.returncode == 0, r.stderr
    for p in images:
        for n in ["labels/seg"] + [f"tables/{n}" for n in names]:
            assert (narrow / p / n).is_dir() == p.startswith("B/03"), (p, n)
    got, want = rows_of(narrow / "tables/feat", fmt), rows_of(dest / "tables/feat", fmt)
    want = want[want.index.str.startswith("B/03/")]
    assert len(want) and len(want) < len(rows_of(dest / "tables/feat", fmt))
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)


def rows_of(table, fmt):
    """A plate's feature table as a frame indexed by PATH_IN_PLATE:LABEL."""
    if fmt == "csv":
        text = ["index", "row", "column", "path_in_well", "path_in_plate", "acquisition_id"]
        return pd.read_csv(table / "table.csv", dtype={k: str for k in text}).set_index("index")
    a = anndata.read_zarr(str(table))
    return pd.concat([a.obs, pd.DataFrame(a.X, index=a.obs_names, columns=a.var_names)], axis=1)


def add_cells(img):
    """labels/cells of a plate's image (NGFF 0.4): the objects of channel 0 over THRESHOLD,
    chunked so that objects cross chunk borders, listed after the image's "old"."""
    data = zarr.open_array(str(img / "0"), mode="r")[...]
    lab = add_labels(img, data)
    zarr.open_group(str(img / "labels"), mode="r+").attrs["labels"] = ["old", "cells"]
    return lab, data


@pytest.mark.timeout(150)
def test_export_into_plate_of_its_own_label_images(tmp_path, roifs_bin):
    """[measure] labels = cells without [process] over a plate whose images have labels/cells:
    export --into the plate itself writes every image's tables/feat (equal to the mount's and
    to regionprops over that image's cells) and the plate's tables/feat (the mount's), each
    listed, labels/cells and every label file untouched; into a copy of the plate it is refused
    (the tables' region names the measured label images), as a taken name is, nothing written;
    --overwrite writes it again (the plate's own table no longer refuses the opening). On main
    every form was refused (exit 2)."""
    plate, images = make_plate(tmp_path, "0.4", "fractal", channels=2)
    refs = {p: add_cells(img) for p, img in images.items()}
    config = write_config(tmp_path / "p.ini", {
        "input": {"path": plate},
        "measure": {"labels": "cells", "table_name": "feat"},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, config) as m:
        presented = {p: mount_copy(m, f"{p}/tables/feat") for p in images}
        lists = {p: attrs(m.path / p / "tables", "0.4") for p in images}
        mine = mount_copy(m, "tables/feat")
        plate_list = attrs(m.path / "tables", "0.4")
    copy = tmp_path / "copy.zarr"
    shutil.copytree(plate, copy)
    kept = snapshot(copy)
    r = run_roifs(roifs_bin, "export", "--into", copy, config, timeout=60)
    assert r.returncode == 2 and "not into" in r.stderr, r.stderr
    assert snapshot(copy) == kept
    labels_before = {f: b for f, b in snapshot(plate).items() if "/labels/" in f}
    r = run_roifs(roifs_bin, "export", "-j", "2", "--into", plate, config, timeout=100)
    assert r.returncode == 0 and "tables/feat" in r.stderr, r.stderr
    for p, img in images.items():
        t = f"{p}/tables/feat"
        same_table(plate / t, write_out(presented[p], tmp_path / "m" / t), "anndata", t)
        assert attrs(img / "tables", "0.4") == lists[p] and lists[p]["tables"][-1] == "feat"
        assert attrs(img / "tables/feat", "0.4")["region"] == {"path": "../labels/cells"}
        check_table(img / "tables/feat", "anndata", *refs[p], channels=("0", "1"))
    same_table(plate / "tables/feat", write_out(mine, tmp_path / "m/tables/feat"), "anndata",
               "tables/feat")
    assert attrs(plate / "tables", "0.4") == plate_list and plate_list["tables"] == ["feat"]
    validate(attrs(plate, "0.4"), "0.4", "plate")
    assert {f: b for f, b in snapshot(plate).items() if "/labels/" in f} == labels_before
    assert not list(plate.rglob(".roifs-*"))
    # --overwrite into the plate itself, which has its plate table now: written again, the same
    refused_then_overwritten(roifs_bin, plate, config, "already has a table 'feat'")


@pytest.mark.timeout(120)
def test_export_into_plate_of_measured_labels_failing_image(tmp_path, roifs_bin):
    """[measure] with the masking table beside the feature table, one image's input chunk
    corrupt: the export fails (exit 1, the image named) and the plate is byte for byte as it
    was, no hidden directory left (every image's three staged groups removed)."""
    plate, images = make_plate(tmp_path, "0.4", "fractal", channels=2)
    bad = images["C/05/0"] / "0"
    chunk = next(f for f in sorted(bad.iterdir()) if not f.name.startswith("."))
    chunk.write_bytes(b"xyz")
    config = measure_config(tmp_path / "p.ini", plate, tmp_path / "cache", "anndata")
    config.write_text(config.read_text().replace("label_name = seg",
                                                  "label_name = seg\ntable_name = seg_table"))
    before = snapshot(plate)
    r = run_roifs(roifs_bin, "export", "--into", plate, config, timeout=90)
    assert r.returncode == 1 and "C/05/0" in r.stderr, r.stderr
    assert snapshot(plate) == before
    assert not list(plate.rglob(".roifs-*")), list(plate.rglob(".roifs-*"))
