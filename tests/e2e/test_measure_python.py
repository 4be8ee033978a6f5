"""[measure] python = feat.py:measure (docs/measurements.md, Python features): called once per
object in the interpreters of the python processor's fork server with the labels crop over the
object's box grown by halo (clipped), the intensities of that box channels first and obj (label,
start, stop, bbox_start, bbox_stop, params); its dict becomes columns after the builtin ones;
each object once across reads and remounts (status measure.calls and the function's own log of
calls); an exception fails the table with EIO, logged, naming the object."""
import errno
import json

import numpy as np
import pytest
from skimage.measure import regionprops_table

from conftest import mounted, write_config
from test_measure import THRESHOLD, make_image, read_table
from test_measure_input import add_labels

FEAT = '''
import json
import numpy as np

def measure(labels, intensity, obj):
    with open({log!r}, "a") as f:
        f.write(json.dumps({{"label": obj["label"], "start": obj["start"], "stop": obj["stop"],
                             "bbox_start": obj["bbox_start"], "bbox_stop": obj["bbox_stop"],
                             "lshape": labels.shape, "ishape": intensity.shape,
                             "params": obj["params"]}}) + "\\n")
    if obj["label"] == {fail}:
        raise ValueError("no good")
    m = labels == obj["label"]
    return {{"npix": int(m.sum()), "gfp_max": intensity[1][m].max(),
             "dapi_mean": float(intensity[0][m].mean())}}
'''


def prepare(tmp_path, fail=-1, halo="2", **sections):
    img, data = make_image(tmp_path, (40, 36))
    lab = add_labels(img, data)
    log = tmp_path / "calls.jsonl"
    (tmp_path / "feat.py").write_text(FEAT.format(log=str(log), fail=fail))
    config = write_config(tmp_path / "meas.ini", {
        "input": {"path": img},
        "measure": {"labels": "cells", "table_name": "feat", "table_format": "csv",
                    "python": "feat.py:measure", "halo": halo},
        "cache": {"dir": tmp_path / "cache"}, **sections})
    return config, lab, data, log


def calls_of(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_python_features_once_per_object(tmp_path, roifs_bin):
    """The function's columns follow the builtin ones and equal numpy over each object's pixels;
    its crops are the bbox grown by the halo and clipped, the intensities channels first; each
    object is called once: a second read and a remount call nothing (the record)."""
    config, lab, data, log = prepare(tmp_path)
    with mounted(roifs_bin, config) as m:
        path = m.path / "tables" / "feat"
        ids, cols, x = read_table(path, "csv")
        (path / "table.csv").read_bytes()
        st = m.status()
        assert st["measure"]["calls"] == len(ids) == lab.max(), st
    assert cols[-3:] == ["npix", "gfp_max", "dapi_mean"] and cols[0] == "area", cols
    rp = regionprops_table(lab, properties=["label", "area", "bbox"])
    np.testing.assert_array_equal(ids, rp["label"])
    np.testing.assert_array_equal(x[:, cols.index("npix")], rp["area"])
    for i, L in enumerate(ids):
        mask = lab == L
        assert x[i, cols.index("gfp_max")] == data[1][mask].max()
        np.testing.assert_allclose(x[i, cols.index("dapi_mean")], data[0][mask].mean(), rtol=1e-12)
    calls = calls_of(log)
    assert sorted(c["label"] for c in calls) == list(ids)  # each object once
    by = {c["label"]: c for c in calls}
    for j, L in enumerate(rp["label"]):
        lo = [rp["bbox-0"][j], rp["bbox-1"][j]]
        hi = [rp["bbox-2"][j], rp["bbox-3"][j]]
        c = by[L]
        assert c["bbox_start"] == lo and c["bbox_stop"] == hi, c
        assert c["start"] == [max(0, v - 2) for v in lo], c
        assert c["stop"] == [min(s, v + 2) for v, s in zip(hi, lab.shape)], c
        shape = [b - a for a, b in zip(c["start"], c["stop"])]
        assert c["lshape"] == shape and c["ishape"] == [2] + shape, c
        assert c["params"] == {}
    with mounted(roifs_bin, config) as m:
        ids2, cols2, x2 = read_table(m.path / "tables" / "feat", "csv")
        assert m.status()["measure"]["calls"] == 0
    np.testing.assert_array_equal(x2, x)
    assert len(calls_of(log)) == len(ids)


def test_python_exception_fails_the_table(tmp_path, roifs_bin):
    """An exception in the function for object 3 fails the table's files with EIO, counted in
    status measure.failed, logged with the object's id and the message; no record: a later read
    calls again (and fails again)."""
    config, lab, data, log = prepare(tmp_path, fail=3)
    with mounted(roifs_bin, config) as m:
        f = m.path / "tables" / "feat" / "table.csv"
        for attempt in (1, 2):
            with pytest.raises(OSError) as e:
                f.read_bytes()
            assert e.value.errno == errno.EIO
            assert m.status()["measure"]["failed"] == attempt
        text = m.log_text()
        assert "object 3" in text and "ValueError: no good" in text, text
    assert not list((tmp_path / "cache").glob("mpyvals-*.rows"))
    assert sum(c["label"] == 3 for c in calls_of(log)) == 2


def test_python_refusals(tmp_path, roifs_bin):
    from conftest import run_roifs
    config, *_ = prepare(tmp_path, halo="1,2,3")
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 2 and "[measure] halo has 3 entries" in r.stderr, r.stderr
    (tmp_path / "bad.py").write_text("def measure(labels, intensity):\n    return {}\n")
    text = config.read_text().replace("feat.py:measure", "bad.py:measure").replace("1,2,3", "0")
    config.write_text(text)
    r = run_roifs(roifs_bin, "warm", config)
    assert r.returncode == 2 and "[measure] python" in r.stderr and "three arguments" in r.stderr, \
        r.stderr


def test_python_on_computed_stitched_labels_and_clean(tmp_path, roifs_bin):
    """On a mount's own labels (ids = unique, stitch = iou: objects cut by ROIs), the function
    sees each stitched object whole (npix equals its area); after an intensity edit only the
    objects whose crops it touches are called again (the others' values from the record of
    each object's), and `roifs clean --unused` removes the Python features' record of the
    earlier table and keeps the current ones (a remount calls nothing)."""
    from conftest import run_roifs
    from test_measure import config_of
    img, data = make_image(tmp_path, (40, 36))
    log = tmp_path / "calls.jsonl"
    (tmp_path / "feat.py").write_text(FEAT.format(log=str(log), fail=-1))
    config = config_of(tmp_path, img, (16, 16), {"ids": "unique", "block": 1000,
                                                 "stitch": "iou", "stitch_iou": 0.3},
                       {"table_format": "csv", "python": "feat.py:measure", "halo": "1, 0"},
                       rois={"grid": "16,16", "halo": "3,3"})
    cache = tmp_path / "cache"
    with mounted(roifs_bin, config) as m:
        ids, cols, x = read_table(m.path / "tables" / "feat", "csv")
        lab = np.asarray(__import__("zarr").open_array(str(m.path / "labels" / "seg" / "0"),
                                                        mode="r")[...])
        assert m.status()["measure"]["calls"] == len(ids)
    np.testing.assert_array_equal(x[:, cols.index("npix")], x[:, cols.index("area")])
    for i, L in enumerate(ids):
        assert x[i, cols.index("gfp_max")] == data[1][lab == L].max()
    first = {p.name for p in cache.glob("mpyvals-*.rows")}
    assert len(first) == 1
    touched = [c["label"] for c in calls_of(log) if c["start"][0] < 8 and c["start"][1] < 8]
    assert 0 < len(touched) < len(ids)
    arr = __import__("zarr").open_array(str(img / "0"), mode="r+")
    arr[1, :8, :8] = data[1, :8, :8] + 7
    data[1, :8, :8] += 7
    with mounted(roifs_bin, config) as m:
        ids2, cols2, x2 = read_table(m.path / "tables" / "feat", "csv")
        assert m.status()["measure"]["calls"] == len(touched)
    assert sorted(c["label"] for c in calls_of(log)[len(ids):]) == sorted(touched)
    for i, L in enumerate(ids2):
        assert x2[i, cols2.index("gfp_max")] == data[1][lab == L].max()
    both = {p.name for p in cache.glob("mpyvals-*.rows")}
    assert len(both) == 2
    r = run_roifs(roifs_bin, "clean", "--unused", config)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in cache.glob("mpyvals-*.rows")} == both - first
    with mounted(roifs_bin, config) as m:
        read_table(m.path / "tables" / "feat", "csv")
        assert m.status()["measure"]["calls"] == 0
    assert len(calls_of(log)) == len(ids) + len(touched)
    assert len(list(cache.glob("mpyobj-*.rows"))) == 1


def test_python_crops_of_an_image_with_t_before_c(tmp_path, roifs_bin):
    """An image of axes t, c, y, x (2 time points: the c axis is not the first) and its label
    image t, y, x whose objects span both time points: the intensity crops are channels first
    over the object's box of every axis, the function's sums (and the builtin sums) equal numpy
    over each object's pixels per channel."""
    from scipy import ndimage
    import zarr
    rng = np.random.default_rng(9)
    ch0 = ndimage.gaussian_filter(rng.normal(size=(2, 20, 18)), (0, 2, 2))
    ch0 = np.clip(ch0 / ch0.std() * 400 + 400, 0, 1000).astype("<u2")
    data = np.stack([ch0, rng.integers(0, 5000, ch0.shape).astype("<u2")], axis=1)  # t, c, y, x
    img = tmp_path / "tc.zarr"
    g = zarr.open_group(str(img), mode="w")
    g.create_dataset("0", data=data, chunks=(1, 1, 8, 8))
    axes = [{"name": "t", "type": "time"}, {"name": "c", "type": "channel"},
            {"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    g.attrs["multiscales"] = [{"version": "0.4", "name": "img", "axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 4}]}]}]
    ch0[1] = ch0[0]  # the objects span both time points: the crops' t extent is 2
    lab = ndimage.label(ch0 > 600)[0].astype("<u4")
    lg = g.require_group("labels")
    lg.attrs["labels"] = ["cells"]
    cg = lg.create_group("cells")
    cg.create_dataset("0", data=lab, chunks=(1, 8, 8))
    cg.attrs["multiscales"] = [{"version": "0.4", "name": "cells", "axes": [
        axes[0], axes[2], axes[3]], "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1.0] * 3}]}]}]
    cg.attrs["image-label"] = {"version": "0.4"}
    (tmp_path / "sums.py").write_text(
        "def measure(labels, intensity, obj):\n"
        "    m = labels == obj['label']\n"
        "    return {'s0': int(intensity[0][m].sum()), 's1': int(intensity[1][m].sum()),\n"
        "            'nch': intensity.shape[0]}\n")
    config = write_config(tmp_path / "tc.ini", {
        "input": {"path": img},
        "measure": {"labels": "cells", "table_name": "feat", "table_format": "csv",
                    "python": "sums.py:measure", "halo": "0,1,1"},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, config) as m:
        ids, cols, x = read_table(m.path / "tables" / "feat", "csv")
    assert len(ids) >= 3 and (x[:, cols.index("nch")] == 2).all()
    assert (x[:, cols.index("bbox-t-stop")] - x[:, cols.index("bbox-t-start")] == 2).all()
    for i, L in enumerate(ids):
        mask = lab == L
        assert x[i, cols.index("s0")] == data[:, 0][mask].sum()
        assert x[i, cols.index("s1")] == data[:, 1][mask].sum()
        assert x[i, cols.index("1-sum")] == data[:, 1][mask].sum()
