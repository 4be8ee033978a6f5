"""Halo (docs/configuration.md, docs/processors.md): each ROI is computed on its read region (the
box grown by the halo, clipped to the array) and roifs keeps the part inside the box. With a halo
of 4 * sigma, a Gaussian blur per ROI equals the blur of the whole array inside every ROI: against
scipy.ndimage.gaussian_filter(whole, sigma, mode="reflect", truncate=4), for the builtin and for
the example Python worker (config/gaussian_worker.py)."""
import shutil

import numpy as np
import pytest
import zarr
from scipy import ndimage

from conftest import PY, REPO, make_task


def random_boxes(rng, shape, cells, axes):
    """Non-overlapping random boxes: at most one per cell of a grid over the given axes (the
    other axes are taken whole), some of them touching the array's edges."""
    boxes = []
    edges = [np.linspace(0, shape[a], cells[i] + 1).astype(int) for i, a in enumerate(axes)]
    for idx in np.ndindex(*cells):
        if rng.random() < 0.2:
            continue
        box = [(0, s) for s in shape]
        for i, a in enumerate(axes):
            lo, hi = edges[i][idx[i]], edges[i][idx[i] + 1]
            start = int(rng.integers(lo, hi - 1))
            stop = int(rng.integers(start + 1, hi + 1))
            box[a] = (start, stop)
        boxes.append(tuple(box))
    return boxes


def reference(data, sigma, dtype):
    blurred = ndimage.gaussian_filter(data.astype(np.float64), sigma, mode="reflect", truncate=4.0)
    if np.dtype(dtype).kind in "ui":
        info = np.iinfo(dtype)
        blurred = np.clip(np.rint(blurred), info.min, info.max)
    return blurred.astype(dtype)


def check_inside(got, want, boxes, exact):
    covered = np.zeros(got.shape, bool)
    for box in boxes:
        sl = tuple(slice(a, b) for a, b in box)
        covered[sl] = True
        if exact:
            # float64 sums in another order may round a value sitting on .5 the other way
            diff = np.abs(got[sl].astype(np.int64) - want[sl].astype(np.int64))
            assert diff.max() <= 1 and np.count_nonzero(diff) <= max(1, diff.size // 10000), box
        else:
            np.testing.assert_allclose(got[sl], want[sl], rtol=1e-6, atol=1e-6, err_msg=str(box))
    assert not got[~covered].any(), "values outside every ROI"


@pytest.mark.parametrize("kind", ["builtin", "worker"])
def test_gaussian_2d(tmp_path, mount, kind):
    rng = np.random.default_rng(11)
    shape, sigma, halo = (150, 170), 2.0, 8
    data = rng.integers(0, 60000, shape).astype("<u2")
    boxes = random_boxes(rng, shape, (4, 5), (0, 1))
    if kind == "builtin":
        process = {"builtin": "gaussian"}
    else:
        shutil.copy(REPO / "config" / "gaussian_worker.py", tmp_path / "gaussian_worker.py")
        process = {"worker": f"{PY} gaussian_worker.py"}
    task = make_task(tmp_path, data, (64, 64), rois=boxes,
                     process={**process, "param.sigma": "2", "threads": 2},
                     sections={"rois": {"halo": f"{halo},{halo}"}})
    with mount(task.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
        assert m.status()["rois"]["failed"] == 0
    check_inside(got, reference(data, sigma, "<u2"), boxes, exact=True)


def test_gaussian_3d_per_axis_sigma(tmp_path, mount):
    rng = np.random.default_rng(12)
    shape = (5, 90, 100)
    data = (rng.random(shape) * 1000).astype("<f4")
    boxes = random_boxes(rng, shape, (3, 4), (1, 2))
    # thin slabs along an edge, on top of the others: every ROI is exact, so the later wins
    boxes += [((z, z + 1), (0, 4), (0, 100)) for z in range(5)]
    task = make_task(tmp_path, data, (2, 32, 32), rois=boxes,
                     process={"builtin": "gaussian", "param.sigma": "0,2,2", "threads": 2},
                     sections={"rois": {"halo": "0,8,8"}})
    with mount(task.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
        assert m.status()["rois"]["failed"] == 0
    check_inside(got, reference(data, (0, 2, 2), "<f4"), boxes, exact=False)
