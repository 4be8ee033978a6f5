"""roifs serve of a plate (docs/serve.md, docs/plates.md): every file a plate mount presents
(plate and well metadata, each image's arrays, labels and tables) is served, byte for byte as
the mount gives it, the images started when first asked for (through arrayset_open_chunk, as a
mount's opens) and closed again under [mount] images_open = 1; a chunk no ROI touches is 404."""
import json

import fsspec
import numpy as np
import pytest
import zarr

from conftest import mounted, write_config
from serving import served
from test_overlay import THRESHOLD, files_of
from test_plate import make_plate, validate, without_provenance


def config_of(tmp_path, name, plate, rois, images_open=1, **process):
    return write_config(tmp_path / f"{name}.ini", {
        "input": {"path": plate},
        "rois": rois,
        "process": {"builtin": "label", "param.value": THRESHOLD, "threads": 2, **process},
        "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg",
                   "table_name": "seg_table"},
        "cache": {"dir": tmp_path / f"cache-{name}"},
        "mount": {"images_open": images_open}})


@pytest.mark.timeout(150)
def test_a_served_plate_is_the_plate_a_mount_presents(tmp_path, roifs_bin):
    plate, images = make_plate(tmp_path, "0.4", "fractal")
    # 52 x 44 images, label chunks of 20 x 16: chunk 2.2 is beyond the one ROI
    (tmp_path / "rois.txt").write_text("0:40, 0:32\n")
    rois = {"file": tmp_path / "rois.txt"}
    mounts, served_cfg = config_of(tmp_path, "m", plate, rois), config_of(tmp_path, "s", plate, rois)
    want, arrays = {}, {}
    with mounted(roifs_bin, mounts) as m:
        for rel in files_of(m.path):
            if not rel.startswith(".roifs/"):
                want[rel] = without_provenance((m.path / rel).read_bytes(), rel)
        for im in ("B/03/0", "C/05/0"):
            arrays[im] = zarr.open(str(m.path / im / "labels/seg/0"), mode="r")[...]
    assert any(r.startswith("B/03/0/tables/seg_table/") for r in want)
    with served(roifs_bin, served_cfg) as s:
        doc = json.loads(s.request("/.roifs/status")[2])
        assert doc["images"]["open"] == 0, doc["images"]  # nothing started before a read
        st, _, body = s.request("/.zattrs")
        assert st == 200
        validate(json.loads(body), "0.4", "plate")
        validate(json.loads(s.request("/B/03/.zattrs")[2]), "0.4", "well")
        # two wells' label images through Zarr over HTTP, one after the other and again (one
        # image open at a time: each read closes the other's)
        for _ in range(2):
            for im in ("B/03/0", "C/05/0"):
                got = zarr.open(fsspec.get_mapper(f"{s.url}/{im}/labels/seg/0"), mode="r")[...]
                np.testing.assert_array_equal(got, arrays[im])
                assert got.any()
        for im in ("B/03/0", "C/05/0"):
            assert s.request(f"/{im}/labels/seg/0/2.2")[0] == 404  # no ROI touches it
            assert s.request(f"/{im}/labels/seg/0/1.1")[0] == 200
        for rel, data in want.items():
            st, _, body = s.request("/" + rel)
            assert st == 200, (rel, st, body[:200], s.log_text())
            assert without_provenance(body, rel) == data, rel
        doc = json.loads(s.request("/.roifs/status")[2])
        assert doc["images"]["failed"] == 0 and doc["images"]["open"] >= 1, doc["images"]
        assert doc["rois"]["failed"] == 0 and doc["rois"]["done"] == 3, doc["rois"]
