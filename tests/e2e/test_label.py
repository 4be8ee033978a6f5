"""The `label` builtin (docs/configuration.md#builtin-processors): connected components of `in >
value` in each ROI's read region, exactly scipy.ndimage.label (faces connect, objects numbered in C
order of their first element), through a mount: random blobs in 2-D and 3-D, several input dtypes
and thresholds, with a halo so that the read region differs from the ROI box; and a ROI whose
object count does not fit the output dtype fails with a message naming both."""
import errno
import zlib

import numpy as np
import pytest
import zarr
from scipy import ndimage

from conftest import line_of, make_task, read_bytes, run_roifs


def blobs(rng, shape, sigma):
    """Smoothed noise scaled to unit deviation: above 1, blobs of every size, some merging,
    some touching edges."""
    field = ndimage.gaussian_filter(rng.standard_normal(shape), sigma)
    return field / field.std()


def boxes_in_grid(rng, shape, cells):
    """Non-overlapping random boxes, one in most cells of a grid over the last two axes (the
    others taken whole)."""
    nd = len(shape)
    edges = [np.linspace(0, shape[a], c + 1).astype(int) for a, c in zip(range(nd - 2, nd), cells)]
    boxes = []
    for iy, ix in np.ndindex(*cells):
        if rng.random() < 0.15:
            continue
        box = [(0, s) for s in shape[:-2]]
        for e, i in ((edges[0], iy), (edges[1], ix)):
            a = int(rng.integers(e[i], e[i + 1] - 8))
            box.append((a, int(rng.integers(a + 8, e[i + 1] + 1))))
        boxes.append(tuple(box))
    return boxes


def expected(inp, boxes, halo, value, out_dtype):
    """scipy on each ROI's read region (box grown by halo, clipped), cropped to the box."""
    want = np.zeros(inp.shape, out_dtype)
    for box in boxes:
        read = [(max(a - h, 0), min(b + h, s)) for (a, b), h, s in zip(box, halo, inp.shape)]
        lab, n = ndimage.label(inp[tuple(slice(a, b) for a, b in read)] > value)
        assert n <= 2 ** 11, "test data: ids must stay exact in every output dtype used"
        inner = tuple(slice(a - r, b - r) for (a, b), (r, _) in zip(box, read))
        want[tuple(slice(a, b) for a, b in box)] = lab[inner]
    return want


# (input dtype, how the blobs become that dtype, threshold as written in the config, the
# threshold as the reference compares it, output dtype or None for the input's)
CASES = {
    "uint16": ("<u2", lambda f: (f * 3000 + 30000).astype("<u2"), "33000", 33000, None),
    "int16-negative": ("<i2", lambda f: (f * 300 - 500).astype("<i2"), "-200", -200, None),
    "int16-fraction": ("<i2", lambda f: (f * 300).astype("<i2"), "299.5", 299.5, "<u4"),
    "float32": ("<f4", lambda f: (f * 0.1).astype("<f4"), "0.1", 0.1, None),
    "float64-negative": ("<f8", lambda f: f - 2, "-1.05", -1.05, "<i4"),
    "uint8": ("|u1", lambda f: np.clip(f * 30 + 100, 0, 255).astype("|u1"), "130", 130, "<u2"),
    # exact 64-bit thresholds: through double, 2^62 + 1 and 2^62 + 2 are one value
    "int64-exact": ("<i8", lambda f: np.int64(2 ** 62) + (f > 0.8) + (f > 1).astype("<i8"),
                    str(2 ** 62 + 1), 2 ** 62 + 1, None),
    "uint64-exact": ("<u8", lambda f: np.uint64(2 ** 64 - 3) + (f > 0.8) + (f > 1).astype("<u8"),
                     str(2 ** 64 - 2), np.uint64(2 ** 64 - 2), "<u2"),
}


def plant_float_ties(data, value):
    """Values equal to float32(value) and one ulp above it: a float64 comparison would take
    float32(0.1) (which is above 0.1) as foreground, numpy's float32 comparison does not."""
    if data.dtype == np.float32:
        flat = data.reshape(-1)
        flat[::97] = np.float32(value)
        flat[1::89] = np.nextafter(np.float32(value), np.float32(1))
    return data


@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_label_vs_scipy(tmp_path, mount, ndim, case):
    dtype, make, text, value, out_dtype = CASES[case]
    rng = np.random.default_rng(zlib.crc32(f"{ndim}{case}".encode()))
    if ndim == 2:
        shape, chunks, halo, cells, sigma = (190, 230), (64, 64), (7, 7), (3, 4), 1.8
    else:
        shape, chunks, halo, cells, sigma = (7, 80, 90), (3, 32, 32), (1, 5, 5), (2, 3), 2.0
    data = plant_float_ties(make(blobs(rng, shape, sigma)), value)
    boxes = boxes_in_grid(rng, shape, cells)
    output = {"compressor": "zstd"}
    if out_dtype:
        output["dtype"] = out_dtype
    task = make_task(tmp_path, data, chunks, rois=boxes, output=output,
                     process={"builtin": "label", "param.value": text, "threads": 2},
                     sections={"rois": {"halo": ",".join(map(str, halo))}})
    want = expected(task.inp, boxes, halo, value, out_dtype or dtype)
    assert want.max() >= 3, "test data: too few objects"
    with mount(task.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
        st = m.status()
    assert st["rois"]["failed"] == 0, st["errors"]
    assert st["calls"] == len(boxes)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_label_default_value_and_param_errors(tmp_path, mount, roifs_bin):
    """value defaults to 0; a value that is not a number is refused (exit 2, file:line)."""
    data = np.zeros((4, 9), "<i2")
    data[0, 1] = data[1, 1] = data[3, 8] = 1
    data[2, 4] = -5
    task = make_task(tmp_path / "ok", data, (4, 9), rois=[((0, 4), (0, 9))],
                     process={"builtin": "label"})
    with mount(task.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
    np.testing.assert_array_equal(got, ndimage.label(data > 0)[0])
    bad = make_task(tmp_path / "bad", data, (4, 9), rois=[((0, 4), (0, 9))],
                    process={"builtin": "label", "param.value": "ten"})
    r = run_roifs(roifs_bin, "check", bad.config)
    assert r.returncode == 2, r.stderr
    assert f"{bad.config}:{line_of(bad.config, 'param.value')}: param.value: 'ten'" in r.stderr


def test_label_count_overflow_fails_roi(tmp_path, mount):
    """300 objects in a uint8 output: that ROI fails (EIO, a status error naming the count and
    the dtype); the other ROI is served."""
    data = np.zeros((2, 600), "|u1")
    data[0, ::2] = 1          # 300 objects in ROI 0
    data[1, :10:2] = 1        # 5 objects in ROI 1
    task = make_task(tmp_path, data, (1, 600), rois=[((0, 1), (0, 600)), ((1, 2), (0, 600))],
                     process={"builtin": "label"}, output={"compressor": "none"})
    with mount(task.config) as m:
        with pytest.raises(OSError) as e:
            read_bytes(m / "0.0")
        assert e.value.errno == errno.EIO
        row = np.frombuffer(read_bytes(m / "1.0"), "|u1")
        np.testing.assert_array_equal(row, ndimage.label(data[1] > 0)[0])
        errs = [x["message"] for x in m.status()["errors"] if x.get("roi") == 0]
        assert any("300 objects do not fit the output dtype uint8" in x for x in errs), errs
        assert m.alive()
