"""HCS plates (docs/plates.md): `[input] path` names an OME-Zarr plate (NGFF 0.4 on Zarr v2,
0.5 on v3); with `ome = labels` the mount presents the plate read through, each selected image
with labels/NAME and tables/NAME exactly as a mount of that image alone gives them; `wells` and
`acquisition` narrow; faults stay with their image; `ome = false` is refused."""
import errno
import json
import os
import re
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import PY, mounted, run_roifs, wait_for, write_config
from test_overlay import THRESHOLD, files_of, make_image

SCHEMAS = Path(os.environ.get("NGFF_SCHEMAS", "/work/shared/reference/ngff-schemas"))

# Fractal's layout: one image per well and acquisition (a second cycle as image 1 of B/03);
# IDR's: one image per field, no acquisitions.
LAYOUTS = {
    "fractal": {"B/03": [("0", 0), ("1", 1)], "C/05": [("0", 0)]},
    "idr": {"A/1": [("0", None), ("1", None), ("2", None)], "B/2": [("0", None), ("1", None)]},
}


def write_group(path, version, attrs):
    path.mkdir(parents=True, exist_ok=True)
    if version == "0.4":
        (path / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
        if attrs is not None:
            (path / ".zattrs").write_text(json.dumps(attrs))
    else:
        node = {"zarr_format": 3, "node_type": "group", "attributes": {}}
        if attrs is not None:
            node["attributes"] = {"ome": {"version": "0.5", **attrs}}
        (path / "zarr.json").write_text(json.dumps(node))


def make_plate(root, version, layout, skip_images=(), channels=0):
    """A plate of make_image's images (each of its own seed) at root/plate.zarr: plate and
    well metadata as the specification writes them. Returns (plate, {path_in_plate: image})."""
    plate = root / "plate.zarr"
    wells = LAYOUTS[layout]
    rows = sorted({w.split("/")[0] for w in wells})
    cols = sorted({w.split("/")[1] for w in wells})
    acqs = sorted({a for ims in wells.values() for _, a in ims if a is not None})
    meta = {"name": "test plate",
            "rows": [{"name": r} for r in rows], "columns": [{"name": c} for c in cols],
            "wells": [{"path": w, "rowIndex": rows.index(w.split("/")[0]),
                       "columnIndex": cols.index(w.split("/")[1])} for w in wells]}
    if acqs:
        meta["acquisitions"] = [{"id": a, "name": f"cycle {a}"} for a in acqs]
    if version == "0.4":
        meta["version"] = "0.4"
    write_group(plate, version, {"plate": meta})
    images, seed = {}, 1
    for w, ims in wells.items():
        write_group(plate / w.split("/")[0], version, None)
        well = {"images": [{"path": p, **({"acquisition": a} if a is not None else {})}
                           for p, a in ims]}
        if version == "0.4":
            well["version"] = "0.4"
        write_group(plate / w, version, {"well": well})
        for p, _ in ims:
            seed += 1
            if f"{w}/{p}" in skip_images:
                continue
            img, _ = make_image(root / f"src{seed}", version, seed=seed, channels=channels)
            shutil.move(str(img), str(plate / w / p))
            images[f"{w}/{p}"] = plate / w / p
    return plate, images


def plate_config(path, inp, cache, **input_keys):
    return write_config(path, {
        "input": {"path": inp, **input_keys},
        "rois": {"grid": "16,16"},
        "process": {"builtin": "label", "param.value": THRESHOLD, "threads": 2},
        "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg", "table_name": "seg_table"},
        "cache": {"dir": cache}})


def added_files(root):
    """The files a mount adds to an image: labels/seg and tables/seg_table."""
    return [f for f in files_of(root) if f.startswith(("labels/seg/", "tables/seg_table/"))]


def without_provenance(data, rel):
    """A metadata file's JSON without the "roifs" provenance (it names the configuration and
    the input, which a single-image mount's differ in); any other file as it is."""
    if not rel.endswith((".zattrs", "zarr.json")):
        return data
    doc = json.loads(data)
    for d in (doc, doc.get("attributes", {})):
        d.pop("roifs", None)
    return doc


def validate(doc, version, schema):
    """Validates doc against the official NGFF schema (skipped without the schemas)."""
    jsonschema = pytest.importorskip("jsonschema")
    d = SCHEMAS / version
    if not d.is_dir():
        pytest.skip(f"no NGFF schemas at {SCHEMAS} (set NGFF_SCHEMAS)")
    store = {}
    for f in d.glob("*.schema"):
        s = json.loads(f.read_text())
        store[s["$id"]] = s
    main = json.loads((d / f"{schema}.schema").read_text())
    cls = jsonschema.validators.validator_for(main)
    resolver = jsonschema.RefResolver(main["$id"], main, store=store)
    cls(main, resolver=resolver).validate(doc)


def attrs(path, version):
    if version == "0.4":
        return json.loads((path / ".zattrs").read_text())
    return json.loads((path / "zarr.json").read_text())["attributes"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("layout", ["fractal", "idr"])
@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_plate_labels_match_single_image_mounts(tmp_path, roifs_bin, version, layout):
    """Every image of the plate gets labels/seg and tables/seg_table byte for byte as a mount
    of that image alone (but the provenance, which names the configuration and input); the
    plate's and the wells' files are read through; the plate, wells and label images validate
    against the official schemas; the status counts the images and wells (after the mount, the
    first image alone is opened: the others are when first looked into)."""
    plate, images = make_plate(tmp_path, version, layout)
    config = plate_config(tmp_path / "plate.ini", plate, tmp_path / "cache")
    got = {}
    with mounted(roifs_bin, config) as m:
        st = m.status()
        assert st["images"] == {"total": len(images), "ready": 1, "done": 0, "failed": 0,
                                "open": 0, "unread": len(images) - 1}, st["images"]
        assert list(st["wells"]) == list(LAYOUTS[layout])
        assert st["failed_images"] == []
        for rel in files_of(plate):  # read through, byte for byte (but the lists with seg)
            if rel.endswith(("labels/.zattrs", "labels/zarr.json", "tables/.zattrs",
                             "tables/zarr.json")) and rel.count("/") == 4:
                continue
            assert (m.path / rel).read_bytes() == (plate / rel).read_bytes(), rel
        validate(attrs(m.path, version), version, "plate")
        for w in LAYOUTS[layout]:
            validate(attrs(m.path / w, version), version, "well")
        for p in images:
            img = m.path / p
            validate(attrs(img / "labels" / "seg", version), version, "label")
            labels = attrs(img / "labels", version)
            assert (labels["ome"]["labels"] if version == "0.5" else labels["labels"]) == \
                ["old", "seg"]
            got[p] = {f: (img / f).read_bytes() for f in added_files(img)}
            assert any(f.startswith("tables/seg_table/") for f in got[p]), p
        st = m.status()
        assert st["images"]["done"] == len(images) and st["images"]["unread"] == 0, st["images"]
        assert sum(w["rois"]["done"] for w in st["wells"].values()) == st["rois"]["done"] > 0
    contents = set()
    for p, img in images.items():
        single = plate_config(tmp_path / "single.ini", img, tmp_path / f"cache-{p.replace('/', '_')}")
        with mounted(roifs_bin, single, mnt=tmp_path / "single") as m:
            want = {f: (m.path / f).read_bytes() for f in added_files(m.path)}
        assert sorted(got[p]) == sorted(want), p
        for f in want:
            assert without_provenance(got[p][f], f) == without_provenance(want[f], f), (p, f)
        contents.add(got[p]["labels/seg/0/" + ("0.0" if version == "0.4" else "c/0/0")])
    assert len(contents) == len(images)  # each image its own labels, not another's


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_plate_narrowing(tmp_path, roifs_bin, version):
    """`wells` (either "C/05" or "C05") and `acquisition` narrow the images, in plate order;
    the others get nothing added; a well the plate has not is refused (exit 2)."""
    plate, images = make_plate(tmp_path, version, "fractal")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache",
                          wells="C05, B/03", acquisition=1)
    with mounted(roifs_bin, config) as m:
        st = m.status()
        assert st["images"]["total"] == 1 and list(st["wells"]) == ["B/03"], st
        assert (m.path / "B/03/1/labels/seg").is_dir()
        assert not (m.path / "B/03/0/labels/seg").exists()
        assert not (m.path / "C/05/0/labels/seg").exists()
    config = plate_config(tmp_path / "q.ini", plate, tmp_path / "cache", wells="C/05")
    with mounted(roifs_bin, config) as m:
        assert m.status()["images"]["total"] == 1
        assert (m.path / "C/05/0/labels/seg").is_dir()
        assert not (m.path / "B/03/0/labels/seg").exists()
    bad = plate_config(tmp_path / "bad.ini", plate, tmp_path / "cache", wells="D/07")
    r = run_roifs(roifs_bin, "check", bad)
    assert r.returncode == 2 and "D/07 is not a well of the plate" in r.stderr, r.stderr


def test_plate_refusals(tmp_path, roifs_bin):
    """ome = false with a plate input, and the plate keys without one, exit 2."""
    plate, images = make_plate(tmp_path, "0.4", "fractal")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    text = config.read_text().replace("ome = labels", "ome = false")
    config.write_text(text.replace("table_name = seg_table\n", ""))
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 2 and "ome = false" in r.stderr and "plate" in r.stderr, r.stderr
    single = plate_config(tmp_path / "s.ini", images["B/03/0"], tmp_path / "cache", wells="B/03")
    r = run_roifs(roifs_bin, "check", single)
    assert r.returncode == 2 and "[input] wells: only for an HCS plate" in r.stderr, r.stderr


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_plate_faults_stay_with_their_image(tmp_path, roifs_bin, version):
    """A missing image, an image whose ROI table is invalid and a listed well that is missing
    fail alone: the status lists each with its reason once something looked into it, the log
    says so once each, the failed images' added files give EIO, and every other image is
    served."""
    plate, images = make_plate(tmp_path, version, "idr", skip_images={"A/1/1"})
    shutil.rmtree(plate / "B/2")  # a listed well that is missing
    bad = images["A/1/2"]
    config = write_config(tmp_path / "p.ini", {
        "input": {"path": plate, "wells": "A/1, B/2"},
        "rois": {"table": "FOV_ROI_table"},
        "process": {"builtin": "label", "param.value": THRESHOLD, "threads": 2},
        "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg", "table_name": "seg_table"},
        "cache": {"dir": tmp_path / "cache"}})
    # image A/1/0 gets a valid csv ROI table of the name; A/1/2 an invalid one
    for img, text in ((images["A/1/0"], "FieldIndex,x_micrometer,y_micrometer,z_micrometer,"
                       "len_x_micrometer,len_y_micrometer,len_z_micrometer\n"
                       "FOV_1,0.0,0.0,0.0,8.0,16.0,1.0\n"),
                      (bad, "FieldIndex,x_micrometer\nA,1\n")):
        shutil.rmtree(img / "tables" / "FOV_ROI_table")
        (img / "tables" / "FOV_ROI_table").mkdir()
        (img / "tables" / "FOV_ROI_table" / "table.csv").write_text(text)
    with mounted(roifs_bin, config) as m:
        st = m.status()  # the mount opened A/1/0; the missing well is known from the plate
        assert [f["path"] for f in st["failed_images"]] == ["B/2"], st["failed_images"]
        assert st["images"]["unread"] == 2, st["images"]
        meta = ".zattrs" if version == "0.4" else "zarr.json"
        for p in ("A/1/1", "A/1/2"):
            with pytest.raises(OSError) as e:
                (m.path / p / "labels" / "seg" / meta).read_bytes()
            assert e.value.errno == errno.EIO, p
        assert (m.path / "A/1/0/labels/seg" / meta).read_bytes()
        st = m.status()
        failed = {f["path"]: f["message"] for f in st["failed_images"]}
        assert sorted(failed) == ["A/1/1", "A/1/2", "B/2"], failed
        assert "missing" in failed["B/2"]
        assert "y_micrometer" in failed["A/1/2"], failed
        assert st["images"]["failed"] == 3 and st["images"]["ready"] == 1, st["images"]
        lab = np.frombuffer((m.path / "A/1/0/labels/seg/0" /
                             ("0.0" if version == "0.4" else "c/0/0")).read_bytes(), "u1")
        assert lab.size > 0
        log = m.log_text()
        for p in ("A/1/1", "A/1/2", "B/2"):
            assert log.count(f"image {p} of the plate failed") == 1, log
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 2, r.stdout + r.stderr
    for p in ("A/1/1", "A/1/2", "B/2"):
        assert p in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("version,fmt", [("0.4", "anndata"), ("0.4", "csv"), ("0.5", "csv")])
def test_plate_table_concatenates_the_images_tables(tmp_path, roifs_bin, version, fmt):
    """MNT/tables/seg_table: every selected image's tables/seg_table rows in plate order (wells,
    then the well's images), with row, column, path_in_well, path_in_plate and acquisition_id
    and the index PATH_IN_PLATE:LABEL, against a reference built here from the images' own
    tables; the plate's tables list names it; an image that fails has no rows in it."""
    import pandas as pd
    plate, images = make_plate(tmp_path, version, "fractal")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    config.write_text(config.read_text().replace("table_name = seg_table",
                                                 f"table_name = seg_table\ntable_format = {fmt}"))
    order = ["B/03/0", "B/03/1", "C/05/0"]
    acq = {"B/03/0": "0", "B/03/1": "1", "C/05/0": "0"}
    with mounted(roifs_bin, config) as m:
        lists = attrs(m.path / "tables", version)
        assert lists["tables"] == ["seg_table"], lists
        want = []
        for p in order:
            row, col, in_well = p.split("/")
            extra = {"row": row, "column": col, "path_in_well": in_well, "path_in_plate": p,
                     "acquisition_id": acq[p]}
            if fmt == "csv":
                t = pd.read_csv(m.path / p / "tables/seg_table/table.csv")
            else:
                import anndata
                a = anndata.read_zarr(str(m.path / p / "tables/seg_table"))
                t = pd.concat([a.obs[["label"]].reset_index(drop=True),
                               pd.DataFrame(a.X, columns=list(a.var_names))], axis=1)
            assert len(t) > 0, p
            t = t.sort_values("label").reset_index(drop=True)
            t.insert(0, "index", [f"{p}:{lab}" for lab in t["label"]])
            for k, v in extra.items():
                t[k] = v
            want.append(t)
        want = pd.concat(want, ignore_index=True)
        if fmt == "csv":
            got = pd.read_csv(m.path / "tables/seg_table/table.csv",
                              dtype={"acquisition_id": str, "path_in_well": str,
                                     "column": str})
            tattrs = attrs(m.path / "tables/seg_table", version)
            assert tattrs["backend"] == "csv" and tattrs["index_key"] == "index", tattrs
        else:
            import anndata
            a = anndata.read_zarr(str(m.path / "tables/seg_table"))
            got = pd.concat([pd.DataFrame({"index": list(a.obs_names)}),
                             a.obs.reset_index(drop=True)[["label"]],
                             pd.DataFrame(a.X, columns=list(a.var_names)),
                             a.obs.reset_index(drop=True)[list(want.columns[-5:])]], axis=1)
        got = got[list(want.columns)]
        assert list(got["index"]) == list(want["index"])
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False)


def set_channels(img, version, labels):
    """Gives the image omero.channels with these labels (wavelength_id "W" + label)."""
    omero = {"channels": [{"label": lab, "wavelength_id": "W" + lab} for lab in labels]}
    if version == "0.4":
        a = json.loads((img / ".zattrs").read_text())
        a["omero"] = omero
        (img / ".zattrs").write_text(json.dumps(a))
    else:
        node = json.loads((img / "zarr.json").read_text())
        node["attributes"]["ome"]["omero"] = omero
        (img / "zarr.json").write_text(json.dumps(node))


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_plate_channel_by_name(tmp_path, roifs_bin, version):
    """`[input] channel = NAME` takes in each image the channel of that label in its
    omero.channels (then of that wavelength_id), whatever its index there: each image's labels
    as a single-image mount with the index gives them; a name an image has not fails it."""
    plate, images = make_plate(tmp_path, version, "fractal", channels=2)
    set_channels(images["B/03/0"], version, ["DAPI", "GFP"])
    set_channels(images["B/03/1"], version, ["GFP", "DAPI"])
    set_channels(images["C/05/0"], version, ["DAPI", "RFP"])
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache", channel="WGFP")
    chunk = "labels/seg/0/" + ("0.0" if version == "0.4" else "c/0/0")
    with mounted(roifs_bin, config) as m:
        got = {p: (m.path / p / chunk).read_bytes() for p in ("B/03/0", "B/03/1")}
        os.listdir(m.path / "C/05/0")  # looked into: opened (and failed)
        failed = {f["path"]: f["message"] for f in m.status()["failed_images"]}
        assert list(failed) == ["C/05/0"] and 'no channel "WGFP"' in failed["C/05/0"], failed
    for p, index in (("B/03/0", 1), ("B/03/1", 0)):
        single = plate_config(tmp_path / "single.ini", images[p], tmp_path / f"c{index}",
                              channel=index)
        with mounted(roifs_bin, single, mnt=tmp_path / "single") as m:
            assert (m.path / chunk).read_bytes() == got[p], p
    assert got["B/03/0"] != got["B/03/1"]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_new_plate_of_computed_images(tmp_path, roifs_bin, version):
    """`ome = true`: a new plate: the plate metadata with its wells and acquisitions narrowed to
    the selection, each selected well's images narrowed likewise, each selected image the
    computed OME-Zarr image of a single-image mount of it (every file but the provenance);
    valid against the official plate, well and image schemas; a failed image's group gives
    EIO."""
    plate, images = make_plate(tmp_path, version, "fractal")
    shutil.rmtree(images["C/05/0"] / "0")  # its level 0 is gone: the image fails
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache", acquisition=0)
    text = config.read_text().replace("ome = labels", "ome = true\nlevels = 2")
    config.write_text(text.replace("table_name = seg_table\n", "").replace("label_name = seg\n", ""))
    with mounted(roifs_bin, config) as m:
        pa = attrs(m.path, version)
        validate(pa, version, "plate")
        pl = pa["ome"]["plate"] if version == "0.5" else pa["plate"]
        assert [w["path"] for w in pl["wells"]] == ["B/03", "C/05"]
        assert [a["id"] for a in pl["acquisitions"]] == [0]
        wa = attrs(m.path / "B/03", version)
        validate(wa, version, "well")
        well = wa["ome"]["well"] if version == "0.5" else wa["well"]
        assert well["images"] == [{"path": "0", "acquisition": 0}]
        assert sorted(os.listdir(m.path / "B")) == sorted(
            ["03", ".zgroup" if version == "0.4" else "zarr.json"])
        validate(attrs(m.path / "B/03/0", version), version, "image")
        got = {f: (m.path / "B/03/0" / f).read_bytes() for f in files_of(m.path / "B/03/0")}
        meta = ".zattrs" if version == "0.4" else "zarr.json"
        with pytest.raises(OSError) as e:
            (m.path / "C/05/0" / meta).read_bytes()
        assert e.value.errno == errno.EIO
        assert [f["path"] for f in m.status()["failed_images"]] == ["C/05/0"]
        assert not (m.path / "B/03/1").exists()
    single = write_config(tmp_path / "single.ini", {
        "input": {"path": images["B/03/0"]},
        "rois": {"grid": "16,16"},
        "process": {"builtin": "label", "param.value": THRESHOLD, "threads": 2},
        "output": {"ome": "true", "levels": 2, "dtype": "<u4",
                   "format": 3 if version == "0.5" else 2},
        "cache": {"dir": tmp_path / "c1"}})
    with mounted(roifs_bin, single, mnt=tmp_path / "single") as m:
        want = {f: (m.path / f).read_bytes() for f in files_of(m.path)
                if not f.startswith(".roifs")}
    assert sorted(got) == sorted(want)
    for f in want:
        assert without_provenance(got[f], f) == without_provenance(want[f], f), f


def threads_of(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def test_plate_images_start_when_first_read(tmp_path, roifs_bin):
    """An image's engines (its compute threads) start when something of it is first read:
    after the mount none is open and the daemon has the threads of no image; reading one
    chunk of one image opens that image alone (status images.open, the daemon's threads grow
    by that image's only); its table read opens no other."""
    plate, images = make_plate(tmp_path, "0.4", "idr")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    with mounted(roifs_bin, config) as m:
        st = m.status()
        assert st["images"]["open"] == 0 and st["images"]["ready"] == 1, st["images"]
        assert st["rois"]["total"] == 12 and st["rois"]["done"] == 0, st["rois"]
        before = threads_of(m.proc.pid)
        (m.path / "A/1/1/labels/seg/0/0.0").read_bytes()
        st = m.status()
        assert st["images"]["open"] == 1, st["images"]
        grown = threads_of(m.proc.pid) - before
        (m.path / "A/1/1/tables/seg_table/.zattrs").read_bytes()
        (m.path / "A/1/1/tables/seg_table/obs/label/0").read_bytes()
        assert m.status()["images"]["open"] == 1
        mid = threads_of(m.proc.pid)
        (m.path / "B/2/0/labels/seg/0/0.0").read_bytes()
        assert m.status()["images"]["open"] == 2
        # each image's levels' compute threads and pollers, started by its first read
        assert grown > 0 and threads_of(m.proc.pid) - mid > 0, (before, grown)


def test_plate_warm_export_and_refusals(tmp_path, roifs_bin):
    """`warm` computes every image of a plate (a mount then finds every ROI done and computes
    nothing); `export` of an `ome = true` plate writes the new plate as the mount presents it;
    the command that does not take a plate yet (apply) refuses it (exit 2)."""
    plate, images = make_plate(tmp_path, "0.4", "fractal")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    r = run_roifs(roifs_bin, "warm", "-j", "2", config, timeout=60)
    assert r.returncode == 0, r.stderr
    with mounted(roifs_bin, config) as m:
        for p in images:
            (m.path / p / "labels/seg/0/0.0").read_bytes()
        st = m.status()
        assert st["rois"]["done"] == st["rois"]["total"] == 36 and st["calls"] == 0, st
    new = tmp_path / "new.ini"
    new.write_text(config.read_text().replace("ome = labels", "ome = true\nlevels = 2")
                   .replace("table_name = seg_table\n", "").replace("label_name = seg\n", ""))
    r = run_roifs(roifs_bin, "export", new, tmp_path / "out", timeout=60)
    assert r.returncode == 0, r.stderr
    with mounted(roifs_bin, new) as m:
        for rel in files_of(m.path):
            if not rel.startswith(".roifs"):
                assert (tmp_path / "out" / rel).read_bytes() == (m.path / rel).read_bytes(), rel
    r = run_roifs(roifs_bin, "apply", config)
    assert r.returncode == 2 and "does not take an HCS plate yet" in r.stderr, r


def test_check_of_a_new_plate_is_not_the_label_overlays(tmp_path, roifs_bin):
    """`check` of an `ome = true` plate opens each image as its mount does (no label overlay):
    a float output, which a label image refuses, is fine; before, each image was refused with
    the overlay's "label values are integers"."""
    plate, _ = make_plate(tmp_path, "0.4", "fractal")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache", acquisition=0)
    config.write_text(config.read_text().replace("ome = labels", "ome = true")
                      .replace("builtin = label", "builtin = add").replace("<u4", "<f4")
                      .replace("table_name = seg_table\n", "").replace("label_name = seg\n", ""))
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 0 and r.stdout.count("image:     ") == 2, r.stdout + r.stderr


def test_clean_of_a_plate(tmp_path, roifs_bin):
    """`clean --unused` and `clean` of a plate take each image's cache directory (`DIR/B/03/0`):
    after a warm and a parameter change, --unused removes the old results of every image; then
    `clean` deletes every image's cache (a mount computes again); an image that cannot be
    opened is named and the exit status is 1."""
    plate, images = make_plate(tmp_path, "0.4", "fractal")
    cache = tmp_path / "cache"
    config = plate_config(tmp_path / "p.ini", plate, cache)
    assert run_roifs(roifs_bin, "warm", "-j", "2", config, timeout=60).returncode == 0
    config.write_text(config.read_text().replace(f"param.value = {THRESHOLD}",
                                                 f"param.value = {THRESHOLD + 1}"))
    assert run_roifs(roifs_bin, "warm", "-j", "2", config, timeout=60).returncode == 0
    r = run_roifs(roifs_bin, "clean", "--unused", config)
    assert r.returncode == 0, r.stderr
    for p in images:
        assert f"cleaned {cache / p}" in r.stdout, r.stdout
    removed = [int(n) for n in re.findall(r"results: (\d+) removed", r.stdout)]
    assert len(removed) == 3 and min(removed) > 0, r.stdout  # each image's old results
    r = run_roifs(roifs_bin, "clean", config)
    assert r.returncode == 0, r.stderr
    for p in images:
        assert f"deleted {cache / p}" in r.stdout and not (cache / p).exists(), r.stdout
    with mounted(roifs_bin, config) as m:
        (m.path / "B/03/0/labels/seg/0/0.0").read_bytes()
        assert m.status()["calls"] > 0
    shutil.rmtree(images["C/05/0"] / "0")
    r = run_roifs(roifs_bin, "clean", config)
    assert r.returncode == 1 and "image C/05/0 cannot be opened" in r.stderr, r
    assert f"deleted {cache / 'B/03/0'}" in r.stdout, r.stdout


def test_status_draws_the_plate(tmp_path, roifs_bin):
    """`roifs status` of a plate mount: the image counts and a map of rows and columns with each
    selected well's progress (ok, NN%, ., X for a failed image), then the failed images."""
    plate, images = make_plate(tmp_path, "0.4", "fractal")
    shutil.rmtree(images["C/05/0"] / "0")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    with mounted(roifs_bin, config) as m:
        for c in files_of(m.path / "B/03/0/labels/seg/0"):
            (m.path / "B/03/0/labels/seg/0" / c).read_bytes()
        r = run_roifs(roifs_bin, "status", m.path)
        assert [ln.split() for ln in r.stdout.splitlines()
                if ln.startswith("     B")] == [["B", "99%"]], r.stdout  # B/03/1 unread
        for p in ("B/03/1", "C/05/0"):  # looked into: opened (C/05/0 fails)
            os.listdir(m.path / p)
        r = run_roifs(roifs_bin, "status", m.path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(ln.startswith("images:  3 (2 ready, 1 open, 1 done, 1 failed, 0 unread) in 2 wells")
               for ln in lines), r.stdout
    head = next(i for i, ln in enumerate(lines) if ln.startswith("plate:"))
    assert lines[head + 1].split() == ["03", "05"], r.stdout
    assert lines[head + 2].split() == ["B", "50%"], r.stdout
    assert lines[head + 3].split() == ["C", "X"], r.stdout
    assert any(ln.startswith("failed:  C/05/0: ") for ln in lines), r.stdout


def test_warm_and_export_take_wells(tmp_path, roifs_bin):
    """`warm --wells` computes only the images of those wells (a mount then computes nothing
    for them, and does for the others); `export --wells` of an `ome = true` plate writes a
    plate of those wells only; a well the configuration does not select, or --wells without a
    plate, is refused (exit 2)."""
    plate, images = make_plate(tmp_path, "0.4", "fractal")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    r = run_roifs(roifs_bin, "warm", "--wells", "C05", config, timeout=60)
    assert r.returncode == 0, r.stderr
    with mounted(roifs_bin, config) as m:
        (m.path / "C/05/0/labels/seg/0/0.0").read_bytes()
        assert m.status()["calls"] == 0
        (m.path / "B/03/0/labels/seg/0/0.0").read_bytes()
        assert m.status()["calls"] > 0
    new = tmp_path / "new.ini"
    new.write_text(config.read_text().replace("ome = labels", "ome = true\nlevels = 1")
                   .replace("table_name = seg_table\n", "").replace("label_name = seg\n", ""))
    r = run_roifs(roifs_bin, "export", "--wells=B/03", new, tmp_path / "out", timeout=60)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    assert [w["path"] for w in attrs(out, "0.4")["plate"]["wells"]] == ["B/03"]
    assert (out / "B/03/1/0").is_dir() and not (out / "C").exists()
    narrow = tmp_path / "narrow.ini"
    narrow.write_text(config.read_text().replace("[input]\n", "[input]\nwells = B/03\n"))
    r = run_roifs(roifs_bin, "warm", "--wells", "C/05", narrow)
    assert r.returncode == 2 and "C/05 is not a well the configuration selects" in r.stderr, r
    single = plate_config(tmp_path / "s.ini", images["B/03/0"], tmp_path / "c2")
    r = run_roifs(roifs_bin, "warm", "--wells", "B/03", single)
    assert r.returncode == 2 and "no HCS plate" in r.stderr, r.stderr


def test_images_open_bounds_the_open_images(tmp_path, roifs_bin):
    """`[mount] images_open = 2`: reading the five images of a plate one after another keeps
    at most two open (the least recently used idle one is closed when another starts; its
    cache stays): the daemon's threads stay those of two images, an image read again after it
    was closed gives the same bytes without computing anything again, and every ROI ran once
    (calls)."""
    plate, images = make_plate(tmp_path, "0.4", "idr")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    # no readahead: the calls counted are those of the chunks read, finished when read
    config.write_text(config.read_text().replace("threads = 2", "threads = 2\nreadahead = 0") +
                      "\n[mount]\nimages_open = 2\n")
    order = list(images)
    with mounted(roifs_bin, config) as m:
        first, threads = {}, []
        for p in order:
            first[p] = [(m.path / p / "labels/seg/0" / c).read_bytes()
                        for c in ("0.0", "1.1", "2.2")]
            st = m.status()
            assert st["images"]["open"] <= 2, st["images"]
            threads.append(threads_of(m.proc.pid))
        # two images' worth, never a third (a few FUSE worker threads may come and go)
        assert max(threads) - threads[1] < threads[1] - threads[0], threads
        calls = m.status()["calls"]
        for p in order:
            again = [(m.path / p / "labels/seg/0" / c).read_bytes()
                     for c in ("0.0", "1.1", "2.2")]
            assert again == first[p], p
        st = m.status()
        assert st["images"]["open"] <= 2 and st["calls"] == calls > 0, st


def wide_plate(root, nwells):
    """A 0.4 plate of nwells wells (row A), each with one copy of one make_image image."""
    plate = root / f"wide{nwells}.zarr"
    wells = [f"A/{c}" for c in range(1, nwells + 1)]
    write_group(plate, "0.4", {"plate": {
        "version": "0.4", "rows": [{"name": "A"}],
        "columns": [{"name": str(c)} for c in range(1, nwells + 1)],
        "wells": [{"path": w, "rowIndex": 0, "columnIndex": i} for i, w in enumerate(wells)]}})
    write_group(plate / "A", "0.4", None)
    img, _ = make_image(root / f"src-wide{nwells}", "0.4", seed=5)
    for w in wells:
        write_group(plate / w, "0.4", {"well": {"version": "0.4", "images": [{"path": "0"}]}})
        shutil.copytree(img, plate / w / "0")
    return plate, wells


def test_mount_reads_only_the_plate_and_wells_metadata(tmp_path, roifs_bin):
    """Mounting a plate opens its first image alone: an image whose metadata is invalid is not
    known failed until something looks into it, and the daemon's open files after the mount
    are those of a two-well plate's mount (no image's reader is held); the size of a chunk not
    computed yet is the same bound in an image opened later. With images_open = 2,
    after reading every image the open files stay those of two open images (a closed image's
    input reader lets its files go too) and a closed image read again gives the same bytes."""
    big, wells = wide_plate(tmp_path, 12)
    small, _ = wide_plate(tmp_path, 2)
    (big / wells[-1] / "0" / ".zattrs").write_text("{}")  # no multiscales: the image fails
    nfd = {}
    for plate in (small, big):
        config = plate_config(tmp_path / f"{plate.name}.ini", plate, tmp_path / f"c-{plate.name}")
        config.write_text(config.read_text() + "\n[mount]\nimages_open = 2\n")
        with mounted(roifs_bin, config) as m:
            nfd[plate] = len(os.listdir(f"/proc/{m.proc.pid}/fd"))
            if plate == small:
                continue
            st = m.status()
            assert st["failed_images"] == [] and st["images"]["unread"] == 11, st["images"]
            assert nfd[big] <= nfd[small] + 1, nfd
            # not computed yet: each chunk's size is the bound, an image opened since the mount's
            # as the first one's (the same array)
            sizes = {os.stat(m.path / w / "0/labels/seg/0/0.0").st_size for w in wells[:6]}
            assert len(sizes) == 1 and min(sizes) > 0, sizes
            first = {w: (m.path / w / "0/labels/seg/0/0.0").read_bytes() for w in wells[:2]}
            after_two = len(os.listdir(f"/proc/{m.proc.pid}/fd"))
            for w in wells[2:-1]:
                (m.path / w / "0/labels/seg/0/0.0").read_bytes()
            with pytest.raises(OSError) as e:
                (m.path / wells[-1] / "0/labels/seg/.zattrs").read_bytes()
            assert e.value.errno == errno.EIO
            st = m.status()
            assert [f["path"] for f in st["failed_images"]] == [wells[-1] + "/0"], st
            assert st["images"]["unread"] == 0 and st["images"]["open"] <= 2, st["images"]
            assert len(os.listdir(f"/proc/{m.proc.pid}/fd")) <= after_two + 1, after_two
            for w in wells[:2]:
                assert (m.path / w / "0/labels/seg/0/0.0").read_bytes() == first[w], w



def test_idle_images_beyond_four_are_closed(tmp_path, roifs_bin):
    """With the default images_open (32), reading ten images one after another keeps open the
    four most recently used idle ones: the others are closed when an image starts (their ~13
    cache and input descriptors each and their memory returned), so the daemon's open files
    after ten images are those after four; the status still counts what a closed image did
    (its ROIs done and calls); every image read again gives the same bytes without computing
    anything again (its cache stayed)."""
    plate, wells = wide_plate(tmp_path, 10)
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    config.write_text(config.read_text().replace("threads = 2", "threads = 2\nreadahead = 0"))
    with mounted(roifs_bin, config) as m:
        nfd, first, done = [], {}, []
        for w in wells:
            first[w] = (m.path / w / "0/labels/seg/0/0.0").read_bytes()
            nfd.append(len(os.listdir(f"/proc/{m.proc.pid}/fd")))
            done.append(m.status()["rois"]["done"])
        assert done == sorted(done) and done[-1] > done[3], done
        st = m.status()
        assert st["images"]["open"] <= 4, st["images"]
        # an image holds about 13: six more images kept open would add 78
        assert nfd[-1] <= nfd[3] + 6, nfd
        calls = st["calls"]
        for w in wells:
            assert (m.path / w / "0/labels/seg/0/0.0").read_bytes() == first[w], w
        st = m.status()
        assert st["calls"] == calls > 0 and st["images"]["open"] <= 4, st

RECORDER = """import os, sys, time
from pathlib import Path
d = Path(sys.argv[1])
sys.stdin.buffer.read()
me = d / "run" / str(os.getpid())
me.touch()
at_once = len(os.listdir(d / "run"))
time.sleep(0.15)
me.unlink()
with open(d / "log", "a") as f:
    f.write(f"{at_once}\\n")
n = 1
for a, b in zip(os.environ["ROIFS_START"].split(","), os.environ["ROIFS_STOP"].split(",")):
    n *= int(b) - int(a)
sys.stdout.buffer.write(bytes(4 * n))
"""


def test_plate_threads_are_shared_round_robin(tmp_path, roifs_bin):
    """`[process] threads = 2` is the whole plate's: four images read in parallel (each its
    own engine with two threads) run at most two ROIs at once between them, the processor's
    own count says (it was eight without the plate's turns), and the turns go round the
    images: every image has a ROI done before any image has all of its ROIs done."""
    plate, wells = wide_plate(tmp_path, 4)
    rec = tmp_path / "rec"
    (rec / "run").mkdir(parents=True)
    (tmp_path / "recorder.py").write_text(RECORDER)
    config = write_config(tmp_path / "p.ini", {
        "input": {"path": plate},
        "rois": {"grid": "32,32"},
        "process": {"command": f"{PY} {tmp_path / 'recorder.py'} {rec}", "threads": 2,
                    "readahead": 0},
        "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg"},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, config) as m:
        def read_image(w):
            for c in files_of(m.path / w / "0/labels/seg/0"):
                (m.path / w / "0/labels/seg/0" / c).read_bytes()
        seen = []
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(read_image, w) for w in wells]
            while not all(f.done() for f in futures):
                seen.append({w: v["rois"] for w, v in m.status()["wells"].items()})
                time.sleep(0.05)
            for f in futures:
                f.result()
        st = m.status()
        seen.append({w: v["rois"] for w, v in st["wells"].items()})
        assert st["rois"]["done"] == st["rois"]["total"] == 4 * 4, st["rois"]
    counts = [int(x) for x in (rec / "log").read_text().split()]
    assert len(counts) == 4 * 4 and max(counts) <= 2, counts
    assert max(counts) == 2, counts  # two at once: the images share them, none is starved
    first_full = next(s for s in seen
                      if any(r.get("total", 0) > 0 and r["done"] == r["total"] for r in s.values()))
    assert all(r.get("done", 0) > 0 for r in first_full.values()), first_full


@pytest.mark.parametrize("flavour", ["ngio", "csv"])
def test_plate_of_masked_images(tmp_path, roifs_bin, flavour):
    """A plate of test_masks.py's images (a label image and an ngio masking ROI table each,
    AnnData or csv): `[rois] table = NAME` is each image's table and its region.path each
    image's label image, so each image's labels/NAME equal a single-image mount of it."""
    from test_masks import ROIS, SCALE, label_image, table_rows, write_image, write_label_image, \
        write_table
    plate = tmp_path / "plate.zarr"
    write_group(plate, "0.4", {"plate": {
        "version": "0.4", "rows": [{"name": "A"}], "columns": [{"name": "1"}, {"name": "2"}],
        "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0},
                  {"path": "A/2", "rowIndex": 0, "columnIndex": 1}]}})
    write_group(plate / "A", "0.4", None)
    imgs = []
    for i, w in enumerate(("A/1", "A/2")):
        write_group(plate / w, "0.4", {"well": {"version": "0.4", "images": [{"path": "0"}]}})
        img = plate / w / "0"
        data = np.random.default_rng(20 + i).integers(0, 1000, (128, 160)).astype("<u2")
        write_image(img, data)
        write_label_image(img, "org", [label_image((128, 160), seed=30 + i),
                                       label_image((64, 80), seed=40 + i)], [1, 2])
        write_table(img, "org_ROI_table", table_rows(ROIS, (SCALE[0] * 2, SCALE[1] * 2)),
                    flavour, "../labels/org")
        imgs.append(img)

    def cfg(path, inp, table, cache):
        return write_config(path, {
            "input": {"path": inp, "level": 1},
            "rois": {"table": table},
            "process": {"builtin": "label", "param.value": 500, "threads": 2},
            "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg"},
            "cache": {"dir": cache}})
    got = {}
    with mounted(roifs_bin, cfg(tmp_path / "p.ini", plate, "org_ROI_table",
                                tmp_path / "cache")) as m:
        assert m.status()["failed_images"] == []
        for img in imgs:
            rel = img.relative_to(plate)
            got[rel] = {f: (m.path / rel / f).read_bytes() for f in added_files(m.path / rel)}
    for img in imgs:
        rel = img.relative_to(plate)
        one = cfg(tmp_path / "one.ini", img, img / "tables/org_ROI_table",
                  tmp_path / f"c-{rel.parent.name}")
        with mounted(roifs_bin, one, mnt=tmp_path / "single") as m:
            want = {f: (m.path / f).read_bytes() for f in added_files(m.path)}
        assert sorted(want) == sorted(got[rel]) and want, rel
        for f in want:
            assert without_provenance(got[rel][f], f) == without_provenance(want[f], f), f
    assert got[Path("A/1/0")]["labels/seg/1/0.0"] != got[Path("A/2/0")]["labels/seg/1/0.0"]


SLOW_LABEL = """import time
import numpy as np


def f(block, roi):
    time.sleep(0.03)
    return ((block > {threshold}) * (1 + block % 3)).astype(np.uint32)
"""


def slow_table_plate(tmp_path, plate, grid, sleep):
    """The configuration of the plate's labels and csv table under `[mount] images_open = 2`,
    a Python processor's ROIs (a grid) each sleeping `sleep` seconds."""
    (tmp_path / "slow.py").write_text(SLOW_LABEL.format(threshold=THRESHOLD)
                                      .replace("time.sleep(0.03)", f"time.sleep({sleep})"))
    return write_config(tmp_path / "p.ini", {
        "input": {"path": plate},
        "rois": {"grid": grid},
        "process": {"python": "slow.py:f", "threads": 2},
        "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg",
                   "table_name": "seg_table", "table_format": "csv"},
        "mount": {"images_open": 2},
        "cache": {"dir": tmp_path / "cache"}})


@pytest.mark.timeout(120)
def test_plate_table_holds_one_image_at_a_time(tmp_path, roifs_bin):
    """The plate's table of eight images with `[mount] images_open = 2` is made one image after
    another (docs/plates.md): while it is made, and after, the status never counts more than
    two images open (each image held while its table is asked, then let go; on 29f608e all
    eight were held at once until the plate's table was made, and stayed open); the table is
    the concatenation of the images' own tables. The ROIs sleep a little so that the sampling
    sees the images come and go."""
    import pandas as pd
    plate, wells = wide_plate(tmp_path, 8)
    config = slow_table_plate(tmp_path, plate, "16,16", 0.03)
    with mounted(roifs_bin, config) as m:
        seen, done = [], threading.Event()

        def sample():
            while not done.is_set():
                seen.append(m.status()["images"]["open"])
                time.sleep(0.02)
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            got = pd.read_csv(m.path / "tables/seg_table/table.csv",
                              dtype={"path_in_well": str, "column": str, "acquisition_id": str})
        finally:
            done.set()
            sampler.join(timeout=30)
        # the images came and went while it was made, never more than two at once
        assert len(seen) >= 5 and max(seen) <= 2 and max(seen) >= 1, seen
        st = m.status()
        assert st["images"]["open"] <= 2 and st["images"]["failed"] == 0, st["images"]
        assert st["rois"]["done"] == st["rois"]["total"] > 0, st["rois"]
        want = []
        for w in wells:
            t = pd.read_csv(m.path / w / "0/tables/seg_table/table.csv")
            assert len(t) > 0, w
            t.insert(0, "index", [f"{w}/0:{lab}" for lab in t["label"]])
            row, col = w.split("/")
            for k, v in zip(("row", "column", "path_in_well", "path_in_plate"),
                            (row, col, "0", f"{w}/0")):
                t[k] = v
            want.append(t)
        want = pd.concat(want, ignore_index=True)
        got = got[list(want.columns)]
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
        assert m.status()["images"]["open"] <= 2


@pytest.mark.timeout(120)
def test_sigterm_while_the_plate_table_is_made(tmp_path, roifs_bin):
    """SIGTERM of the daemon while the plate's table is made (its thread holding an image whose
    ROIs run 2 s): the read fails with EIO, the daemon exits 0 within 15 s, its engines stopped
    under the table's thread (ptable_allow, ptable_wait: no image held after the stop, every
    answer given before the FUSE state goes; ASan checks it under ROIFS_BIN=build-asan)."""
    plate, wells = wide_plate(tmp_path, 4)
    config = slow_table_plate(tmp_path, plate, "32,32", 2)
    with mounted(roifs_bin, config, checked=False) as m:
        got = {}

        def read():
            try:
                got["data"] = (m.path / "tables/seg_table/table.csv").read_bytes()
            except OSError as e:
                got["errno"] = e.errno
        reader = threading.Thread(target=read)
        reader.start()
        wait_for(lambda: m.status()["rois"].get("running", 0) > 0, 30, "a ROI of the table")
        t0 = time.monotonic()
        m.proc.send_signal(signal.SIGTERM)
        assert m.proc.wait(timeout=30) == 0, m.log_text()
        assert time.monotonic() - t0 < 15, m.log_text()
        reader.join(timeout=30)
        assert not reader.is_alive()
        assert got.get("errno") in (errno.EIO, errno.ENOTCONN), got
