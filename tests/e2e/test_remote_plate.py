"""A plate over HTTP (docs/remote.md, docs/plates.md): `[input] path` the URL of an OME-Zarr
plate served by nginx (no directory listing, a token required) behind the fault proxy, which
counts every request: the plate's and the selected wells' metadata name the images, nothing
is listed and nothing outside the needed objects is asked for; each selected image's computed
image (`ome = true`, mounted and exported; ROIs from a grid, or from each image's own ROI
table named bare) equals the same task's over the local plate; a 404 on one well's image
fails that image alone (EIO) while the other is served; `ome = labels` presents the plate's
own files derived from its metadata, as over the local copy."""
import errno
import re

import numpy as np
import pytest
import zarr

from conftest import mounted, run_roifs
from remote_server import FaultProxy, headers_file, nginx
from test_overlay import files_of
from test_plate import make_plate, plate_config

IMAGES = ("B/03/0", "C/05/0")  # acquisition 0 of the fractal layout (B/03/1 is not selected)


def configs(tmp_path, plate, url, table=False):
    """The local plate's task (ome = true) and the same task over url; with table, the ROIs of
    each image's own table "fov" (a bare name: IMAGE/tables/fov)."""
    def one(name, path, extra):
        cfg = plate_config(tmp_path / f"{name}.ini", path, tmp_path / f"cache-{name}",
                           acquisition=0, **extra)
        text = cfg.read_text().replace("ome = labels", "ome = true")
        if table:
            text = text.replace("grid = 16,16", "table = fov")
        cfg.write_text(text.replace("table_name = seg_table\n", "").replace(
            "label_name = seg\n", ""))
        return cfg
    hf = headers_file(tmp_path / "headers")
    remote = one("remote", url, {"headers_file": hf, "retries": 1})
    # one image open at a time: a remote image closed (its reader parked) and opened again
    remote.write_text(remote.read_text() + "\n[mount]\nimages_open = 1\n")
    return one("local", plate, {}), remote


def add_fov_tables(images):
    """tables/fov in each image: two fields of view (x, y, z, len_x, len_y, len_z in um)."""
    from test_ome_input import write_anndata_table
    X = np.array([[0.0, 0.0, 0.0, 5.5, 13.0, 1.0], [5.5, 13.0, 0.0, 5.5, 13.0, 1.0]], "<f4")
    for img in images.values():
        tables = zarr.open_group(str(img / "tables"), mode="a")
        write_anndata_table(tables, "fov", X, "roi_table")
        tables.attrs["tables"] = tables.attrs.get("tables", []) + ["fov"]


def image_files(mnt, image):
    return {f: (mnt / image / f).read_bytes() for f in files_of(mnt / image)
            if not f.endswith((".zattrs", "zarr.json"))}  # (provenance names the input)


# what a plate's mount may ask for: the plate's, its rows' and the selected wells' group
# metadata, each selected image's metadata and level 0 (its .zarray and chunks), and its ROI
# table by name (a HEAD of a node tells an array from a group: docs/remote.md)
NEEDED = re.compile(r"^/plate\.zarr(/[BC](/(03|05)(/0(/0)?)?)?)?/"
                    r"(\.zattrs|\.zgroup|\.zarray|zarr\.json|\d+\.\d+|c(/\d+)+)$"
                    r"|^/plate\.zarr/(B/03|C/05)/0/tables/fov(/[\w.]+)*$")


@pytest.mark.parametrize("version,table", [("0.4", True), ("0.5", False)],
                         ids=["0.4-table", "0.5-grid"])
def test_plate_over_http_is_the_local_task(tmp_path, roifs_bin, version, table):
    plate, images = make_plate(tmp_path / "data", version, "fractal")
    if table:
        add_fov_tables(images)
    with nginx(tmp_path / "data", tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        local, remote = configs(tmp_path, plate, f"{proxy.url}/plate.zarr", table)
        r = run_roifs(roifs_bin, "check", remote)
        assert r.returncode == 0, r.stderr + r.stdout
        with mounted(roifs_bin, local, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, remote, tmp_path / "mnt_remote") as mr:
            want_of = {}
            for image in IMAGES:
                want, got = image_files(ml.path, image), image_files(mr.path, image)
                want_of[image] = want
                assert sorted(got) == sorted(want) and len(want) > 4, image
                for f in want:
                    assert got[f] == want[f], (image, f)
            assert not (mr.path / "B/03/1").exists()
            assert image_files(mr.path, IMAGES[0]) == want_of[IMAGES[0]]  # opened again
            assert mr.status()["failed_images"] == []
        r = run_roifs(roifs_bin, "export", remote, tmp_path / "out.zarr", timeout=90)
        assert r.returncode == 0, r.stderr
        for image in IMAGES:
            assert image_files(tmp_path / "out.zarr", image) == want_of[image], image
        paths = [p for _, p, _ in proxy.requests]
        assert paths and not [p for p in paths if p.endswith("/")], paths  # never a listing
        outside = [p for p in paths if not NEEDED.search(p)]
        assert not outside, outside
        assert not [p for p in paths if "/B/03/1" in p]  # an image not selected: not read


def test_404_on_one_wells_image_fails_that_image_only(tmp_path, roifs_bin):
    plate, _ = make_plate(tmp_path / "data", "0.4", "fractal")
    with nginx(tmp_path / "data", tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        local, remote = configs(tmp_path, plate, f"{proxy.url}/plate.zarr")
        proxy.schedule(r"/plate\.zarr/C/05/0/\.zattrs$", *["404"] * 100)
        with mounted(roifs_bin, local, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, remote, tmp_path / "mnt_remote") as mr:
            with pytest.raises(OSError) as e:
                (mr.path / "C/05/0/.zattrs").read_bytes()
            assert e.value.errno == errno.EIO
            want, got = image_files(ml.path, "B/03/0"), image_files(mr.path, "B/03/0")
            assert got == want and len(want) > 4
            st = mr.status()
        assert [f["path"] for f in st["failed_images"]] == ["C/05/0"], st["failed_images"]
        assert "/plate.zarr/C/05/0" in st["failed_images"][0]["message"], st["failed_images"]


CHUNK = re.compile(r"/\d+(\.\d+)+$")  # a chunk key (of a 2-d array: the fixture's)


@pytest.mark.timeout(120)
def test_ome_labels_mount_of_a_remote_plate_is_the_local_copy_s(tmp_path, roifs_bin):
    """`ome = labels` mounted over https://.../plate.zarr presents exactly the files the same
    task's mount over the local plate presents (paths and bytes): the plate's, its rows' and
    wells' metadata, each selected image's files with labels/seg and tables/seg_table, the
    image not selected (B/03/1) read through, the plate's tables/seg_table; zarr-python reads
    the labels through it; `serve` gives the same files; no directory URL is requested; no
    chunk key, nor anything of the image not selected, is asked at the mount's start; each key
    at most once by the mount's HEADs."""
    from collections import Counter
    from serving import served
    from test_remote_overlay import same_tree, served_tree
    plate, _ = make_plate(tmp_path / "data", "0.4", "fractal")
    local = plate_config(tmp_path / "local.ini", plate, tmp_path / "cache-local", acquisition=0)
    with nginx(tmp_path / "data", tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        remote = plate_config(tmp_path / "remote.ini", f"{proxy.url}/plate.zarr",
                              tmp_path / "cache-remote", acquisition=0,
                              headers_file=headers_file(tmp_path / "headers"))
        r = run_roifs(roifs_bin, "check", remote)
        assert r.returncode == 0, r.stderr + r.stdout
        with mounted(roifs_bin, local, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, remote, tmp_path / "mnt_remote") as mr:
            before = len(proxy.requests)  # the mount's start: metadata, no chunk key
            assert not [p for m, p, _ in proxy.requests[:before] if CHUNK.search(p)]
            assert not [p for _, p, _ in proxy.requests[:before] if "/B/03/1/" in p]
            want = same_tree(ml, mr)
            for rel in (".zattrs", "B/.zgroup", "C/05/.zattrs", "B/03/0/labels/seg/.zattrs",
                        "C/05/0/tables/seg_table/obs/.zattrs", "B/03/1/0/.zarray",
                        "tables/seg_table/.zattrs", "B/03/0/0/1.2", "B/03/1/0/0.0"):
                assert rel in want, rel
            for image in IMAGES:
                got = zarr.open(str(mr.path / image / "labels/seg/0"), mode="r")[:]
                exp = zarr.open(str(ml.path / image / "labels/seg/0"), mode="r")[:]
                assert got.any() and np.array_equal(got, exp), image
        mount_requests = list(proxy.requests)  # (serve's reader asks its own: freshness)
        with served(roifs_bin, remote) as s:  # the same tree, over HTTP
            served_tree(s, want)
        paths = [p for _, p, _ in proxy.requests]
        assert paths and not [p for p in paths if p.endswith("/")], paths  # never a listing
        heads = Counter(p for m, p, _ in mount_requests if m == "HEAD" and CHUNK.search(p))
        assert heads and max(heads.values()) == 1, heads.most_common(3)
