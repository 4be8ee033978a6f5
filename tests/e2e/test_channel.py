"""[input] channel (docs/configuration.md, docs/labels.md#one-channel-of-an-image): one channel of
an input with a c axis, named by its OME axes (a Fractal-style plate image, with a ROI table in
micrometres), by Zarr v3 dimension_names or by the _ARRAY_DIMENSIONS attribute: the ROIs, the
processor's block and the output have the other axes only. Errors (exit 2): no c axis, an index out
of range, watch."""
import json

import numpy as np
import pytest
import zarr

from conftest import line_of, make_task, mounted, run_roifs, write_config
from test_labels import reference
from test_ome_input import PX0, fov_rows, fractal_boxes, level_shape, make_plate, make_tables


def test_array_dimensions_attribute(tmp_path, roifs_bin):
    data = np.random.default_rng(1).integers(0, 1000, (3, 40, 48)).astype("<u2")
    t = make_task(tmp_path, data, (1, 16, 16), rois=[], process={"builtin": "add"},
                  attrs={"_ARRAY_DIMENSIONS": ["c", "y", "x"]},
                  roi_lines=["0:20, 0:30", "15:40, 10:48"],
                  sections={"input": {"channel": 2}})
    with mounted(roifs_bin, t.config) as m:
        meta = json.loads((m / ".zarray").read_text())
        assert meta["shape"] == [40, 48] and meta["chunks"] == [16, 16]
        assert json.loads((m / ".zattrs").read_text())["_ARRAY_DIMENSIONS"] == ["y", "x"]
        got = zarr.open(str(m.path), mode="r")[...]
    want = np.zeros((40, 48), "<u2")
    want[0:20, 0:30] = data[2, 0:20, 0:30] + 1
    want[15:40, 10:48] = data[2, 15:40, 10:48] + 1
    np.testing.assert_array_equal(got, want)


def test_ome_axes_and_roi_table(tmp_path, roifs_bin):
    """Level 1 of a c,z,y,x image, channel 1, ROIs from a table in micrometres; the output is
    z,y,x, and with labels ids = unique the label builtin sees that channel only."""
    image, data = make_plate(tmp_path)
    make_tables(image)
    boxes = [b[1:] for b in fractal_boxes(fov_rows(), level_shape(1), PX0 * 2)]
    cfg = write_config(tmp_path / "task.ini", {
        "input": {"path": image, "level": 1, "channel": 1},
        "rois": {"table": image / "tables" / "FOV_ROI_table"},
        "process": {"builtin": "label", "param.value": 600},
        "output": {"dtype": "<u4", "chunks": "1,16,16"},
        "labels": {"ids": "unique", "block": 1000},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
        assert json.loads((m / ".zarray").read_text())["shape"] == list(level_shape(1)[1:])
        got = zarr.open(str(m.path), mode="r")[...]
        assert m.status()["calls"] == len(boxes)
    want = reference(data[1][1], boxes, (0, 0, 0), 600, "<u4", "unique", 1000)
    np.testing.assert_array_equal(got, want)
    # another channel is another result
    cfg.write_text(cfg.read_text().replace("channel = 1", "channel = 0"))
    with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
        got = zarr.open(str(m.path), mode="r")[...]
    np.testing.assert_array_equal(
        got, reference(data[1][0], boxes, (0, 0, 0), 600, "<u4", "unique", 1000))


def test_v3_dimension_names(tmp_path, roifs_bin):
    arr = tmp_path / "in.zarr"
    data = np.arange(2 * 6 * 8, dtype="<u2").reshape(6, 2, 8)  # y, c, x
    (arr / "c" / "0" / "0").mkdir(parents=True)
    (arr / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [6, 2, 8], "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [6, 2, 8]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["y", "c", "x"], "attributes": {}}))
    (arr / "c" / "0" / "0" / "0").write_bytes(data.tobytes())
    cfg = write_config(tmp_path / "task.ini", {
        "input": {"path": "in.zarr", "channel": 1}, "rois": {"grid": "3,4"},
        "process": {"builtin": "copy"}, "output": {"format": 3, "chunks": "3,4"},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
        meta = json.loads((m / "zarr.json").read_text())
        assert meta["shape"] == [6, 8] and meta["dimension_names"] == ["y", "x"]
        got = np.frombuffer((m / "c" / "1" / "1").read_bytes(), "<u2").reshape(3, 4)
    np.testing.assert_array_equal(got, data[3:6, 1, 4:8])


@pytest.mark.parametrize("case", ["no-c-axis", "out-of-range", "watch", "roi-dims"])
def test_errors(tmp_path, roifs_bin, case):
    data = np.zeros((2, 8, 8), "<u2")
    attrs = None if case == "no-c-axis" else {"_ARRAY_DIMENSIONS": ["c", "y", "x"]}
    inp = {"channel": 5 if case == "out-of-range" else 1}
    if case == "watch":
        inp["watch"] = "true"
    roi = "0:2, 0:8, 0:8" if case == "roi-dims" else "0:8, 0:8"
    t = make_task(tmp_path, data, (1, 8, 8), rois=[], roi_lines=[roi], attrs=attrs,
                  sections={"input": inp})
    r = run_roifs(roifs_bin, "check", t.config)
    assert r.returncode == 2, r.stderr
    if case == "roi-dims":  # a ROI list then has the other dimensions only
        assert r.stderr.startswith(f"roifs: {t.rois_file}:1: "), r.stderr
        return
    assert r.stderr.startswith(f"roifs: {t.config}:{line_of(t.config, '^channel')}: "), r.stderr
    needle = {"no-c-axis": "has no c axis", "out-of-range": "5 is out of range (the c axis",
              "watch": "cannot be used with watch"}[case]
    assert needle in r.stderr, r.stderr


def test_ome_output_has_no_c_axis(tmp_path, roifs_bin):
    """ome = true: the presented image's axes are the input's without c, and its pyramid
    halves y and x of the channel."""
    image, data = make_plate(tmp_path)
    cfg = write_config(tmp_path / "task.ini", {
        "input": {"path": image, "level": 0, "channel": 1}, "rois": {"grid": "1,32,32"},
        "process": {"builtin": "copy"},
        "output": {"ome": "true", "levels": 2, "chunks": "1,32,32"},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
        axes = json.loads((m / ".zattrs").read_text())["multiscales"][0]["axes"]
        assert [a["name"] for a in axes] == ["z", "y", "x"]
        np.testing.assert_array_equal(zarr.open(str(m / "0"), mode="r")[...], data[0][1])
        assert zarr.open(str(m / "1"), mode="r").shape == (3, 48, 64)
