"""OME-Zarr output (docs/ome-fractal.md#ome-zarr-output: [output] ome/levels/downsample): with ome
= true the mount is an OME-Zarr image group whose levels 1.. are computed lazily from the level
above (the mean of each 2x2 block, or its top-left element), read only where needed, at both
formats, with axes and pixel sizes from an OME input; warm and export cover every level and a
changed input reaches the lowest one. Metadata conformance is in test_ome_ngff.py."""
import json
import os

import numpy as np
import pytest
import zarr

from conftest import image_level_task, mounted, run_roifs
from test_ome_input import PX0, make_plate


@pytest.fixture(scope="module")
def plate(tmp_path_factory):
    root = tmp_path_factory.mktemp("ome")
    image, data = make_plate(root)
    return root, image, data


def downsample_ref(a, nearest):
    """One pyramid step in y, x (the last two axes): the top-left element, or the mean of the
    2x2 block that exists, rounded half to even for integers."""
    if nearest:
        return a[..., ::2, ::2]
    y, x = a.shape[-2:]
    pad = [(0, 0)] * (a.ndim - 2) + [(0, y % 2), (0, x % 2)]
    f = np.pad(a.astype(np.float64), pad, constant_values=np.nan)
    f = f.reshape(*a.shape[:-2], (y + 1) // 2, 2, (x + 1) // 2, 2)
    m = np.nanmean(f, axis=(-3, -1))
    return np.rint(m).astype(a.dtype) if a.dtype.kind in "iu" else m.astype(a.dtype)


def read_v3_level(path):
    """An uncompressed format 3 array ("/" keys) read with numpy; missing chunks: fill."""
    meta = json.loads((path / "zarr.json").read_text())
    shape, chunks = meta["shape"], meta["chunk_grid"]["configuration"]["chunk_shape"]
    dt = np.dtype({"uint16": "<u2", "int16": "<i2", "uint8": "u1"}[meta["data_type"]])
    out = np.full(shape, meta["fill_value"], dt)
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    for idx in np.ndindex(*grid):
        p = path / "c" / "/".join(map(str, idx))
        if not p.exists():
            continue
        blk = np.frombuffer(p.read_bytes(), dt).reshape(chunks)
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, shape))
        out[sl] = blk[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def ome_task(tmp_path, fmt, method, levels=4, data=None, rois=None, output=None, readahead=-1):
    from conftest import make_task
    rng = np.random.default_rng(11)
    if data is None:
        data = rng.integers(0, 60000, (2, 75, 101)).astype("<u2")
    if rois is None:
        rois = [[(0, 2), (3, 40), (5, 90)], [(1, 2), (30, 75), (60, 101)]]
    out = {"ome": "true", "levels": levels, "downsample": method, "format": fmt,
           "chunks": "1,16,16", **(output or {})}
    return make_task(tmp_path, data, (1, 16, 16), rois=rois, output=out,
                     process={"builtin": "add", "param.value": 1, "threads": 3,
                              "readahead": readahead})


@pytest.mark.parametrize("fmt,method", [(2, "mean"), (2, "nearest"), (3, "mean")])
def test_ome_output_pyramid(tmp_path, roifs_bin, fmt, method):
    task = ome_task(tmp_path, fmt, method)
    want = np.zeros_like(task.inp)
    for r in task.rois:
        sl = tuple(slice(a, b) for a, b in r)
        want[sl] = task.inp[sl] + 1
    with mounted(roifs_bin, task.config, task.mnt) as m:
        names = sorted(os.listdir(m.path))
        if fmt == 2:
            assert names == [".roifs", ".zattrs", ".zgroup", "0", "1", "2", "3"]
            g = zarr.open_group(str(m.path), mode="r")
            ms = g.attrs["multiscales"][0]
            assert ms["version"] == "0.4"
            levels = [g[str(lv)][...] for lv in range(4)]
        else:
            assert names == [".roifs", "0", "1", "2", "3", "zarr.json"]
            meta = json.loads((m.path / "zarr.json").read_text())
            assert meta["node_type"] == "group"
            assert meta["attributes"]["ome"]["version"] == "0.5"
            ms = meta["attributes"]["ome"]["multiscales"][0]
            levels = [read_v3_level(m.path / str(lv)) for lv in range(4)]
        assert not (m.path / "1" / ".roifs").exists()
        st = json.loads((m.path / ".roifs" / "status").read_text())
        assert [lv["level"] for lv in st["levels"]] == [0, 1, 2, 3]
    assert [a["name"] for a in ms["axes"]] == ["z", "y", "x"]
    assert [d["path"] for d in ms["datasets"]] == ["0", "1", "2", "3"]
    for lv, d in enumerate(ms["datasets"]):
        assert d["coordinateTransformations"][0]["scale"] == [1.0, 2.0 ** lv, 2.0 ** lv]
    np.testing.assert_array_equal(levels[0], want)
    ref = want
    for lv in range(1, 4):
        ref = downsample_ref(ref, method == "nearest")
        assert levels[lv].shape == ref.shape
        np.testing.assert_array_equal(levels[lv], ref, err_msg=f"level {lv}")


def test_ome_output_reads_only_what_it_needs(tmp_path, roifs_bin):
    """One chunk of level 2 computes only the level-0 ROIs under its footprint."""
    data = np.arange(1 * 128 * 128, dtype="<u2").reshape(1, 128, 128)
    rois = [[(0, 1), (y, y + 16), (x, x + 16)] for y in range(0, 128, 16)
            for x in range(0, 128, 16)]
    task = ome_task(tmp_path, 2, "mean", levels=3, data=data, rois=rois, readahead=0)
    with mounted(roifs_bin, task.config, task.mnt) as m:
        z2 = zarr.open(str(m.path / "2"), mode="r")
        assert z2.shape == (1, 32, 32)
        blk = z2[0:1, 16:32, 0:16]  # chunk 0.1.0: level-0 rows 64..128, columns 0..64
        st = json.loads((m.path / ".roifs" / "status").read_text())
        assert st["calls"] == 16, st
        assert st["levels"][1]["calls"] == 4
        assert st["levels"][2]["calls"] == 1
        full = data + 1
    ref = downsample_ref(downsample_ref(full, False), False)
    np.testing.assert_array_equal(blk, ref[0:1, 16:32, 0:16])


def test_ome_output_from_ome_input(plate, tmp_path, roifs_bin):
    """Axes and pixel sizes come from the input's multiscales; level 0 = the input level."""
    root, image, data = plate
    image_level_task(tmp_path, image, 1, ":, :, 0:40, 10:60",
                     output={"ome": "true", "levels": 3, "chunks": "1,1,16,16"})
    want = np.zeros_like(data[1])
    want[:, :, 0:40, 10:60] = data[1][:, :, 0:40, 10:60] + 1
    with mounted(roifs_bin, tmp_path / "task.ini", tmp_path / "mnt") as m:
        g = zarr.open_group(str(m.path), mode="r")
        ms = g.attrs["multiscales"][0]
        got = [g[str(lv)][...] for lv in range(3)]
    assert [a["name"] for a in ms["axes"]] == ["c", "z", "y", "x"]
    assert ms["axes"][2]["unit"] == "micrometer"
    for lv, d in enumerate(ms["datasets"]):
        s = d["coordinateTransformations"][0]["scale"]
        assert s[:2] == [1.0, 1.0]
        assert s[2:] == pytest.approx([PX0 * 2 * 2 ** lv] * 2)
    ref = want
    np.testing.assert_array_equal(got[0], ref)
    for lv in (1, 2):
        ref = downsample_ref(ref, False)
        np.testing.assert_array_equal(got[lv], ref)


def test_ome_output_warm_export_and_input_change(tmp_path, roifs_bin):
    """warm and export cover every level; a changed input reaches the lowest level."""
    task = ome_task(tmp_path, 2, "mean", levels=3)
    r = run_roifs(roifs_bin, "warm", task.config, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (task.cache / "L1").is_dir() and (task.cache / "L2").is_dir()
    dest = tmp_path / "out.zarr"
    r = run_roifs(roifs_bin, "export", task.config, dest, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "0 chunk files written" not in r.stderr
    g = zarr.open_group(str(dest), mode="r")
    assert g.attrs["multiscales"][0]["datasets"][2]["path"] == "2"
    want = np.zeros_like(task.inp)
    for roi in task.rois:
        sl = tuple(slice(a, b) for a, b in roi)
        want[sl] = task.inp[sl] + 1
    ref = [want]
    for _ in range(2):
        ref.append(downsample_ref(ref[-1], False))
    for lv in range(3):
        np.testing.assert_array_equal(g[str(lv)][...], ref[lv])
    # rewrite part of the input: every level follows after a remount
    z = zarr.open(str(task.input), mode="r+")
    z[:, 0:16, 0:16] = 7
    inp = z[...]
    want = np.zeros_like(inp)
    for roi in task.rois:
        sl = tuple(slice(a, b) for a, b in roi)
        want[sl] = inp[sl] + 1
    with mounted(roifs_bin, task.config, task.mnt) as m:
        g = zarr.open_group(str(m.path), mode="r")
        got2 = g["2"][...]
    np.testing.assert_array_equal(got2, downsample_ref(downsample_ref(want, False), False))
