"""Mounted-tree semantics (SPEC §5, §6): read-only, stat never computes, exact sizes from
open on, and ordinary tools (cp -r, cat, ls) see an ordinary Zarr array."""
import errno
import hashlib
import json
import os
import subprocess

import numpy as np
import pytest
import zarr

from conftest import chunk_key, chunks_touched, make_task, read_bytes, roi_slices

SHAPE, CHUNKS = (25, 30), (10, 10)  # 3 x 3 chunks, the last row an edge row
ROIS = [((0, 5), (0, 5)), ((8, 14), (12, 18)), ((21, 25), (25, 30)), ((12, 15), (3, 8))]
TOUCHED = sorted(chunks_touched(ROIS, SHAPE, CHUNKS))  # 5 of the 9 chunks


def fs_task(tmp_path, compressor="blosc"):
    inp = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    task = make_task(tmp_path, inp, CHUNKS, rois=ROIS,
                     process={"builtin": "add", "param.value": 1, "threads": 2},
                     output={"compressor": compressor})
    ref = np.zeros(SHAPE, "<u2")
    for roi in ROIS:
        ref[roi_slices(roi)] = inp[roi_slices(roi)] + 1
    return task, ref


def run(*args, timeout=60):
    return subprocess.run(list(map(str, args)), capture_output=True, timeout=timeout)


def test_read_only(tmp_path, mount):
    task, _ = fs_task(tmp_path)
    with mount(task.config) as m:
        chunk = m / "0.0"
        attempts = {
            "open chunk O_WRONLY": lambda: os.open(chunk, os.O_WRONLY),
            "open chunk O_RDWR": lambda: os.open(chunk, os.O_RDWR),
            "open chunk wb (trunc)": lambda: open(chunk, "wb"),
            "open .zarray r+": lambda: open(m / ".zarray", "r+b"),
            "open status for append": lambda: open(m / ".roifs" / "status", "ab"),
            "create file": lambda: os.open(m / "new", os.O_CREAT | os.O_WRONLY, 0o644),
            "create chunk-like file": lambda: open(m / "1.2", "xb"),
            "mkdir": lambda: os.mkdir(m / "newdir"),
            "unlink chunk": lambda: os.unlink(chunk),
            "unlink .zarray": lambda: os.unlink(m / ".zarray"),
            "rmdir .roifs": lambda: os.rmdir(m / ".roifs"),
            "rename chunk": lambda: os.rename(chunk, m / "9.9"),
            "symlink": lambda: os.symlink("0.0", m / "link"),
            "hard link": lambda: os.link(chunk, m / "hard"),
            "truncate chunk": lambda: os.truncate(chunk, 0),
        }
        wrong = {}
        for name, fn in attempts.items():
            try:
                r = fn()
                (os.close(r) if isinstance(r, int) else r.close())
                wrong[name] = "succeeded"
            except OSError as e:
                if e.errno != errno.EROFS:
                    wrong[name] = errno.errorcode.get(e.errno, e.errno)
        assert not wrong, f"expected EROFS: {wrong}"
        names = set(os.listdir(m.path))
        assert {".zarray", ".zattrs", "0.0", "1.1"} <= names
        assert not names & {"new", "1.2", "newdir", "9.9", "link", "hard"}


@pytest.mark.parametrize("compressor", ["none", "blosc"])
def test_stat_does_not_compute(tmp_path, mount, compressor):
    task, _ = fs_task(tmp_path, compressor)
    full = int(np.prod(CHUNKS)) * 2
    with mount(task.config) as m:
        for idx in TOUCHED:  # exact, or blosc's bound until the open (test_size_contract.py)
            st = os.stat(m / chunk_key(idx))
            assert st.st_size == (full if compressor == "none" else full + 16), (idx, st)
            assert st.st_blocks == (0 if compressor == "blosc" else -(-full // 512)), (idx, st)
        st = m.status()
        assert st["calls"] == 0 and st["rois"]["done"] == 0 and st["chunks"]["cached"] == 0, st

        path = m / "1.1"
        fd = os.open(path, os.O_RDONLY)
        try:
            data = b""
            while chunk := os.read(fd, 1 << 16):
                data += chunk
            assert os.fstat(fd).st_size == len(data)
        finally:
            os.close(fd)
        assert len(data) > 0
        assert os.stat(path).st_size == len(data)
        if compressor == "none":
            assert len(data) == full
        assert m.status()["calls"] >= 1


def test_cp_cat_ls(tmp_path, mount):
    task, ref = fs_task(tmp_path)
    dest = tmp_path / "copy.zarr"
    keys = [chunk_key(i) for i in TOUCHED]
    with mount(task.config) as m:
        r = run("cp", "-r", m.path, dest)  # on a fresh mount: every chunk size is 0 here
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(zarr.open(str(dest), mode="r")[:], ref)
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        for k in keys:
            assert (dest / k).read_bytes() == read_bytes(m / k), k
        assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == \
            sorted(keys)

        r = run("cat", m / "1.1")
        assert r.returncode == 0 and r.stdout == read_bytes(m / "1.1")

        r = run("ls", m.path)
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.decode().split()) == sorted(keys)
        r = run("ls", "-la", m.path, m.path / ".roifs")
        assert r.returncode == 0, r.stderr


def test_status_file(tmp_path, mount):
    task, ref = fs_task(tmp_path)
    with mount(task.config) as m:
        r = run("cat", m / ".roifs" / "status")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["rois"] == {**st["rois"], "total": 4, "running": 0, "done": 0, "failed": 0}
        assert st["rois"]["pending"] == 4
        assert st["chunks"] == {**st["chunks"], "total": 9, "present": 5, "cached": 0}
        assert st["calls"] == 0 and st["errors"] == []

        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        st = m.status()
        assert st["rois"] == {**st["rois"], "total": 4, "pending": 0, "running": 0,
                              "done": 4, "failed": 0}
        assert st["chunks"] == {**st["chunks"], "total": 9, "present": 5, "cached": 5}
        assert st["calls"] == 4 and st["errors"] == []
        for group in ("rois", "chunks"):
            keys = ("total", "pending", "running", "done", "failed") if group == "rois" \
                else ("total", "present", "cached")
            assert all(type(st[group][k]) is int for k in keys), st


META_NAMES = {".zarray", ".zattrs", ".zgroup", "zarr.json"}


def metadata_md5(root, table_dir=None):
    """{path: md5} of every metadata file of the tree at root (and every file of table_dir,
    whose metadata and data are made from the rows), .roifs left out."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".roifs")
        rel = os.path.relpath(dirpath, root)
        in_table = table_dir is not None and (rel + "/").startswith(table_dir + "/")
        for name in filenames:
            if name in META_NAMES or in_table:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    out[os.path.normpath(os.path.join(rel, name))] = \
                        hashlib.md5(f.read()).hexdigest()
    return out


def read_every_file(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".roifs"]
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                f.read()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["array2", "array3", "ome2", "ome3", "labels2", "labels3"])
def test_metadata_depends_only_on_the_job(tmp_path, roifs_bin, kind):
    """SPEC §5: every metadata file (.zarray, .zattrs, .zgroup, zarr.json: the array's, an
    OME group's and its levels', the overlay's labels and tables lists, label image and
    masking table) is byte for byte the same on a cold mount, after everything was computed,
    after `roifs warm`, on a remount and on a mount at another mountpoint: what a mount found
    in the cache and when it started are in the status file, not in the attributes."""
    from conftest import mounted, run_roifs
    table_dir = None
    if kind.startswith("array"):
        task, _ = fs_task(tmp_path)
        if kind == "array3":
            task.config.write_text(task.config.read_text().replace(
                "[output]\n", "[output]\nformat = 3\n"))
        config = task.config
    elif kind.startswith("ome"):
        from test_ome_output import ome_task
        config = ome_task(tmp_path, int(kind[-1]), "mean", levels=3).config
    else:
        from test_overlay import make_image, overlay_config
        img, _ = make_image(tmp_path, "0.4" if kind == "labels2" else "0.5")
        config = overlay_config(tmp_path, img, table="seg_table", table_format="anndata")
        table_dir = "tables/seg_table"
    with mounted(roifs_bin, config, tmp_path / "mnt") as m:
        cold = metadata_md5(m.path, table_dir)
        assert ".zattrs" in cold or "zarr.json" in cold, cold
        read_every_file(m.path)
        assert metadata_md5(m.path, table_dir) == cold
        st = m.status()
        assert st["results"]["cached_at_start"] == 0 and st["results"]["made_from"] is None
        assert st["started"].endswith("Z")
    with mounted(roifs_bin, config, tmp_path / "mnt") as m:  # on the warm cache
        assert metadata_md5(m.path, table_dir) == cold
        st = m.status()
        assert st["results"]["cached_at_start"] == st["rois"]["total"] > 0
        assert st["results"]["made_from"] <= st["results"]["made_until"] <= st["started"]
    r = run_roifs(roifs_bin, "warm", config, timeout=60)
    assert r.returncode == 0, r.stderr
    with mounted(roifs_bin, config, tmp_path / "elsewhere") as m:
        assert metadata_md5(m.path, table_dir) == cold
        assert m.status()["calls"] == 0
