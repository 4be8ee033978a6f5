"""`ome = labels` mounted and served over a remote image (docs/remote.md, The label overlay):
the input image's own files derived from its metadata (no listing), each chunk key's
existence by one HEAD when its array's directory is first looked into; the whole tree equal,
file by file, to the same task's over a local copy."""
import errno
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import mounted, run_roifs, wait_for
from remote_server import FaultProxy, headers_file, nginx
from serving import served
from test_remote import labels_config, ome_root  # noqa: F401 (the fixture)


def tree(mnt):
    """{relative path: bytes} of every file under mnt but .roifs/, metadata parsed with the
    provenance (which names the input) dropped."""
    out = {}
    for p in sorted(Path(mnt).rglob("*")):
        rel = p.relative_to(mnt).as_posix()
        if rel.startswith(".roifs") or not p.is_file():
            continue
        out[rel] = p.read_bytes()
        if p.name in (".zattrs", "zarr.json"):
            out[rel] = without_provenance(out[rel])
    return out


def without_provenance(text):
    doc = json.loads(text)
    doc.pop("roifs", None)
    if isinstance(doc.get("attributes"), dict):
        doc["attributes"].pop("roifs", None)
    return doc


def same_tree(ml, mr, s=None):
    """The mounts ml (local) and mr (remote) present the same files (paths and bytes), and so
    does the server s of the remote task; returns them."""
    want, got = tree(ml.path), tree(mr.path)
    assert (sorted(set(got) - set(want)), sorted(set(want) - set(got))) == ([], [])
    for rel in want:
        assert got[rel] == want[rel], rel
    return want


def served_tree(s, want):
    for rel, body in want.items():
        st, _, got_body = s.request("/" + rel)
        assert st == 200, rel
        assert (without_provenance(got_body) if isinstance(body, dict) else got_body) == body, rel


config = labels_config  # the same task as test_remote.py's


@pytest.mark.timeout(120)
def test_ome_labels_mount_and_serve_of_a_remote_image_are_the_local_copy_s(
        ome_root, tmp_path, roifs_bin):  # noqa: F811
    """The mount of `ome = labels` over https://.../image presents exactly the files the same
    task's mount over a local copy presents (paths and bytes: the image's levels, labels and
    tables, and labels/seg computed), a chunk missing from the input (404) absent from both;
    zarr-python reads the label image and the image through it; `serve` gives the same
    files. A chunk read by its path costs the HEADs of its key and of its path's directories'
    first keys, not of the array's; no directory URL is ever requested and each chunk key is
    asked by HEAD at most once per process."""
    root0, image0 = ome_root
    root = tmp_path / "data"
    shutil.copytree(root0, root)
    image = root / image0.relative_to(root0)
    keys = sorted(p.relative_to(image).as_posix() for p in (image / "0").rglob("*")
                  if p.is_file() and not p.name.startswith("."))
    missing = keys[1]  # a chunk of level 0 absent from the input: a 404
    (image / missing).unlink()
    tables = zarr.open_group(str(image / "tables"))  # its Zarr v3 tables listed too: nodes
    tables.attrs["tables"] = tables.attrs["tables"] + ["FOV_ROI_table_v3", "nuclei_ROI_table_v3"]
    local = config(tmp_path / "local", image, {})
    with nginx(root, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        remote = config(tmp_path / "remote", f"{proxy.url}/{image.relative_to(root)}",
                        {"headers_file": headers_file(tmp_path / "headers")})
        r = run_roifs(roifs_bin, "check", remote)
        assert r.returncode == 0 and "refused" not in r.stdout, r.stdout + r.stderr
        with mounted(roifs_bin, local, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, remote, tmp_path / "mnt_remote") as mr:
            first = len(proxy.requests)  # the mount's own start asked what it reads
            # one chunk read by its path: its key and its path's first keys asked, no other
            assert (mr.path / keys[-1]).read_bytes() == (image / keys[-1]).read_bytes()
            level0 = [p for m, p, _ in proxy.requests[first:]
                      if m == "HEAD" and p.startswith(f"/{image.relative_to(root)}/0/")]
            assert 1 <= len(level0) <= 4, level0
            want = same_tree(ml, mr)
            assert missing not in want and keys[0] in want and len(want) > 40
            assert "tables/FOV_ROI_table/obs/.zattrs" in want
            assert "tables/FOV_ROI_table_v3/obs/_index/zarr.json" in want  # another format
            assert [k for k in want if k.startswith("labels/seg/0/") and "zarr" not in k]
            for arr in ("labels/seg/0", "labels/seg/1", "0", "1", "labels/nuclei/0"):
                np.testing.assert_array_equal(zarr.open(str(mr.path / arr), "r")[...],
                                              zarr.open(str(ml.path / arr), "r")[...])
            heads = Counter(p for m, p, _ in proxy.requests[first:] if m == "HEAD")
            assert len(heads) > 100 and set(heads.values()) == {1}, heads.most_common(3)
        with served(roifs_bin, remote) as s:
            served_tree(s, want)
            assert s.request("/" + missing)[0] == 404
        paths = [p for _, p, _ in proxy.requests]
    log = (tmp_path / "nginx" / "access.log").read_text()
    assert paths and not [p for p in paths if p.endswith("/")], paths  # never a listing
    assert not [line for line in log.splitlines() if "/ HTTP" in line]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_labels_mount_of_a_remote_image_with_a_masking_table(tmp_path, roifs_bin, version):
    """OME-Zarr 0.4 (Zarr v2, chunk keys "1.2") and 0.5 (Zarr v3, keys "c/1/2"), the overlay's
    masking table tables/seg_table added: the remote mount presents the local copy's files, a
    missing chunk absent, and `serve` the same."""
    from test_overlay import make_image, overlay_config
    root = tmp_path / "data"
    root.mkdir()
    img, _ = make_image(root, version)
    if version == "0.5":  # labels/old as a group of its own metadata (a named node)
        (img / "labels" / "old" / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "group", "attributes": {"ome": {
                "version": "0.5", "multiscales": [{"axes": [
                    {"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
                    "datasets": [{"path": "0", "coordinateTransformations": [
                        {"type": "scale", "scale": [0.5, 0.25]}]}]}]}}}))
    else:  # its table an AnnData one, whose encoding names X
        zarr.open_group(str(img / "tables" / "FOV_ROI_table")).attrs["encoding-type"] = "anndata"
    missing = "0/c/1/1" if version == "0.5" else "0/1.1"
    (img / missing).unlink()
    (tmp_path / "local").mkdir()
    (tmp_path / "remote").mkdir()
    local = overlay_config(tmp_path / "local", img, table="seg_table")
    with nginx(root, tmp_path / "nginx") as base:
        remote = overlay_config(tmp_path / "remote", f"{base}/{img.name}", table="seg_table")
        hf = headers_file(tmp_path / "headers")
        remote.write_text(remote.read_text().replace("[input]\n", f"[input]\nheaders_file = {hf}\n"))
        with mounted(roifs_bin, local, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, remote, tmp_path / "mnt_remote") as mr:
            want = same_tree(ml, mr)
            assert missing not in want and [k for k in want if k.startswith("tables/seg_table/")]
            if version == "0.4":  # (zarr-python 2 reads no v3)
                np.testing.assert_array_equal(
                    zarr.open(str(mr.path / "labels/seg/0"), "r")[...],
                    zarr.open(str(ml.path / "labels/seg/0"), "r")[...])
        with served(roifs_bin, remote) as s:
            served_tree(s, want)
            assert s.request("/" + missing)[0] == 404
    log = (tmp_path / "nginx" / "access.log").read_text()
    assert "HTTP" in log and not [line for line in log.splitlines() if "/ HTTP" in line]


@pytest.mark.timeout(120)
def test_a_failed_head_or_get_of_an_input_file_fails_loudly_and_is_asked_again(
        tmp_path, roifs_bin):
    """A 403 to one chunk key's HEAD: the key is not listed that time (the log names the URL
    and the status), and the next listing asks it again and shows it; a 403 to a file's GET:
    its open is EIO, and the next open reads it. Every other file is served meanwhile. Names
    in the labels list that would leave the image ("../..", "a/./b", "/abs") are not asked."""
    from test_overlay import make_image, overlay_config
    root = tmp_path / "data"
    root.mkdir()
    img, _ = make_image(root, "0.4")
    labels = zarr.open_group(str(img / "labels"))  # names that would leave the image: not followed
    labels.attrs["labels"] = ["old", "../../secret", "a/./b", "/abs"]
    (root / "secret").mkdir()
    zarr.open_group(str(root / "secret"))
    (tmp_path / "remote").mkdir()
    with nginx(root, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        cfg = overlay_config(tmp_path / "remote", f"{proxy.url}/{img.name}")
        hf = headers_file(tmp_path / "headers")
        cfg.write_text(cfg.read_text().replace("[input]\n", f"[input]\nheaders_file = {hf}\n"))
        # (a batch's failed request is asked once more alone: two 403s fail the key's look)
        proxy.schedule(r"/1/0\.1$", "403", "403", method="HEAD")
        proxy.schedule(r"/2/0\.0$", "403", method="GET")
        with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
            first = sorted(os.listdir(m.path / "1"))
            assert "0.1" not in first and "0.0" in first and ".zarray" in first, first
            wait_for(lambda: "/1/0.1" in m.log_text() and "403" in m.log_text(), 20,
                     "the log naming the refused key")
            assert "0.1" in os.listdir(m.path / "1")
            assert (m.path / "1" / "0.1").read_bytes() == (img / "1" / "0.1").read_bytes()
            with pytest.raises(OSError) as e:
                (m.path / "2" / "0.0").read_bytes()
            assert e.value.errno == errno.EIO
            assert (m.path / "2" / "0.0").read_bytes() == (img / "2" / "0.0").read_bytes()
            assert (m.path / "labels" / "seg" / "0" / "0.0").stat().st_size > 0
        assert proxy.count(r"/1/0\.1$", "HEAD") == 3
        bad = [p for _, p, _ in proxy.requests
               if "/./" in p or "/../" in p or "secret" in p or "//" in p]
        assert proxy.requests and not bad, bad
