"""roifs serve of a plate (docs/serve.md, docs/plates.md): every file a plate mount presents
(plate and well metadata, each image's arrays, labels and tables) is served, byte for byte as
the mount gives it, the images started when first asked for (through arrayset_open_chunk, as a
mount's opens) and closed again under [mount] images_open = 1; a chunk no ROI touches is 404.
The status page draws the plate as a map of its wells, each coloured by its state."""
import json
import re
import shutil
import subprocess

import fsspec
import numpy as np
import pytest
import zarr

from conftest import mounted, write_config
from serving import served, wait_then_hang_up
from test_overlay import THRESHOLD, files_of
from test_plate import LAYOUTS, make_plate, validate, without_provenance

# docs/serve.md, The status page: the states' colours
COLOURS = {"idle": (0xc8, 0xc8, 0xc8), "busy": (0xf2, 0xb7, 0x05), "done": (0x2e, 0x9e, 0x44),
           "failed": (0xd6, 0x28, 0x28)}


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


def blobs(png, colour, min_area=300):
    """The centres (y, x) of the regions of png painted in colour, larger than min_area px
    (the legend's squares are 10 x 10 px, a well's 26 x 26)."""
    from PIL import Image
    from skimage.measure import label, regionprops
    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    mask = (np.abs(img - colour).max(axis=2) <= 8)
    return [r.centroid for r in regionprops(label(mask)) if r.area >= min_area]


@pytest.mark.timeout(120)
def test_the_status_page_draws_the_plate_map(tmp_path, roifs_bin, monkeypatch):
    """2 x 2 wells: B/03 done (every chunk read), B/05 computing (one chunk read: some of its
    ROIs done, readahead = 0), C/03 not started, C/05 failed (its image has no level 0)."""
    monkeypatch.setitem(LAYOUTS, "map", {w: [("0", None)] for w in ("B/03", "B/05", "C/03",
                                                                    "C/05")})
    plate, images = make_plate(tmp_path, "0.4", "map")
    shutil.rmtree(images["C/05/0"] / "0")
    # every image stays open: a closed image's ROIs count as pending until it opens again
    config = config_of(tmp_path, "p", plate, {"grid": "16,16"}, images_open=8, readahead=0)
    png = tmp_path / "page.png"
    with served(roifs_bin, config) as s:
        b03 = zarr.open(fsspec.get_mapper(f"{s.url}/B/03/0/labels/seg/0"), mode="r")
        assert b03[...].any()
        assert s.request("/B/05/0/labels/seg/0/0.0")[0] == 200
        assert s.request("/C/05/0/labels/seg/0/0.0")[0] in (404, 500)  # opened: it fails
        doc = json.loads(s.request("/.roifs/status")[2])
        assert [f["path"] for f in doc["failed_images"]] == ["C/05/0"], doc
        st, h, page = s.request("/")
        assert st == 200 and h["content-type"].startswith("text/html")
        page = page.decode()
        assert 'id="plate"' in page and 'id="grid"' not in page
        cells = dict((w, int(c)) for c, w in
                     re.findall(r'<rect class="s(\d)"[^>]*><title>([A-Z]/\d+)', page))
        assert cells == {"B/03": 3, "B/05": 2, "C/03": 1, "C/05": 4}, page
        for state in ("idle", "busy", "done", "failed"):
            assert f'id="n-{state}">1<' in page, page
        # the picture: chromium (Debian's) draws the page as a browser would
        chromium = shutil.which("chromium")
        if not chromium:
            pytest.fail("Debian's chromium is needed (scripts/install-deps.sh)")
        r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                            "--hide-scrollbars", "--window-size=800,900",
                            f"--screenshot={png}", s.url + "/"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert png.exists(), r.stderr
    at = {state: blobs(png, c) for state, c in COLOURS.items()}
    assert all(len(v) == 1 for v in at.values()), at
    (dy, dx), = at["done"]
    (by, bx), = at["busy"]
    (iy, ix), = at["idle"]
    (fy, fx), = at["failed"]
    # rows B then C, columns 03 then 05
    assert abs(dy - by) < 3 and abs(iy - fy) < 3 and iy > dy + 20
    assert abs(dx - ix) < 3 and abs(bx - fx) < 3 and bx > dx + 20


# Labels of a plate's image: ROI 0 sleeps while the file `slow` exists; each call appends the
# ROI's index to `calls`.
SLOW_LABELS = """\
import os, time
import numpy as np

def f(block, roi):
    with open("calls", "a") as out:
        out.write(f"{roi.index}\\n")
    if roi.index == 0 and os.path.exists("slow"):
        time.sleep(8)
    return (block > 0).astype(np.uint32) * (roi.index + 1)
"""


@pytest.mark.timeout(120)
def test_a_client_that_goes_away_cancels_its_interest_in_a_plate(tmp_path, roifs_bin):
    """As test_serve.py's case, in a plate's image (whose opens hold the image until they are
    answered: arrayset_withdraw_chunk). One compute thread, no read-ahead: ROI 0 of B/03/0
    runs for 8 s, a client asks for chunk 1.1 (ROI 4) behind it, both hang up: nothing is
    held any more, ROI 4 is never computed, chunk 2.2 (ROI 8) comes right after ROI 0, and the
    image is let go: reading another image with images_open = 1 closes it."""
    plate, _ = make_plate(tmp_path, "0.4", "fractal")
    (tmp_path / "slow.py").write_text(SLOW_LABELS)
    (tmp_path / "slow").touch()
    cfg = write_config(tmp_path / "s.ini", {
        "input": {"path": plate}, "rois": {"grid": "20,16"},
        "process": {"python": "slow.py:f", "threads": 1, "readahead": 0},
        "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg"},
        "cache": {"dir": tmp_path / "cache"}, "mount": {"images_open": 1}})

    def calls():
        p = tmp_path / "calls"
        return p.read_text().split() if p.exists() else []

    with served(roifs_bin, cfg) as s:
        paths = [f"/B/03/0/labels/seg/0/{c}" for c in ("0.0", "1.1")]
        h = wait_then_hang_up(s, paths, lambda: calls() == ["0"], 20)
        assert h["gone"] == 2 and h["held"] == 0, h
        assert s.request("/B/03/0/labels/seg/0/2.2", timeout=60)[0] == 200
        assert calls() == ["0", "8"]
        assert s.request("/C/05/0/labels/seg/0/0.0", timeout=60)[0] == 200
        doc = json.loads(s.request("/.roifs/status")[2])
        assert doc["images"]["open"] == 1, doc["images"]  # B/03/0 was let go, then closed
