"""stitch = iou (docs/labels.md#stitching): objects cut by ROI borders merged by their IoU in the
zones where read regions overlap, transitively, taking the smallest id, against a numpy reference
written from docs/labels.md: blobs crossing grid borders (a halo), blobs crossing overlapping ROIs
(no halo), two thresholds; the global pass is made once (calls == ROIs, a remount computes nothing
and reuses the stored mapping), shared by two processes on one cache, and survives a kill -9 in its
middle."""

import numpy as np
import pytest
import zarr
from scipy import ndimage

from conftest import all_at_once, done_before_kill_9, make_task, mounted, run_roifs
from test_labels import blobs, reference

SHAPE = (96, 120)
CHUNKS = (32, 40)
GRID = [((y, y + 32), (x, x + 40)) for y in range(0, 96, 32) for x in range(0, 120, 40)]
OVERLAPPING = [((0, 50), (0, 64)), ((40, 96), (0, 70)), ((0, 60), (50, 120)),
               ((45, 96), (60, 120))]


def read_region(box, halo, shape):
    return [(max(a - h, 0), min(b + h, s)) for (a, b), h, s in zip(box, halo, shape)]


def stitch_reference(inp, rois, halo, value, dtype, block, threshold):
    """docs/labels.md#stitching: unique ids, then for each pair of ROIs r < s whose read regions
    overlap, in their overlap zone Z, objects x of r and y of s merged when |x & y| / |x | y| >= t
    (in Z, from the whole results), transitively, each object taking its smallest id."""
    labs = []
    for box in rois:
        rr = read_region(box, halo, inp.shape)
        lab, _ = ndimage.label(inp[tuple(slice(a, b) for a, b in rr)] > value)
        labs.append((rr, lab))
    parent = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for r in range(len(rois)):
        for s in range(r + 1, len(rois)):
            (ra, la), (sa, lb) = labs[r], labs[s]
            z = [(max(p[0], q[0]), min(p[1], q[1])) for p, q in zip(ra, sa)]
            if any(a >= b for a, b in z):
                continue
            a = la[tuple(slice(p - o[0], q - o[0]) for (p, q), o in zip(z, ra))]
            b = lb[tuple(slice(p - o[0], q - o[0]) for (p, q), o in zip(z, sa))]
            for x, y in set(zip(a[(a > 0) & (b > 0)].tolist(), b[(a > 0) & (b > 0)].tolist())):
                inter = np.count_nonzero((a == x) & (b == y))
                union = np.count_nonzero(a == x) + np.count_nonzero(b == y) - inter
                if inter / union >= threshold:
                    gx, gy = find(r * block + x), find(s * block + y)
                    if gx != gy:
                        parent[max(gx, gy)] = min(gx, gy)
    out = reference(inp, rois, halo, value, dtype, "unique", block)
    ids = np.unique(out[out > 0])
    lut = {int(i): find(int(i)) for i in ids}
    mapped = out.copy()
    for i, root in lut.items():
        if root != i:
            mapped[out == i] = root
    return mapped, sum(1 for i, r in lut.items() if r != i)


def stitch_task(tmp_path, rois, halo, threshold, delay=None, seed=7):
    process = {"builtin": "label", "param.value": "0.6"}
    if delay:
        process["param.delay"] = delay
    t = make_task(tmp_path, blobs(seed, SHAPE), CHUNKS, rois=rois, process=process,
                  output={"dtype": "<u4"},
                  sections={"rois": {"halo": "%d,%d" % halo},
                            "labels": {"ids": "unique", "block": 1000, "stitch": "iou",
                                       "stitch_iou": threshold}})
    want, merged = stitch_reference(t.inp, rois, halo, 0.6, "<u4", 1000, threshold)
    return t, want, merged


@pytest.mark.parametrize("threshold", [0.3, 0.8])
@pytest.mark.parametrize("layout", ["grid-halo", "overlapping"])
def test_stitch_matches_reference(tmp_path, roifs_bin, layout, threshold):
    rois, halo = (GRID, (6, 6)) if layout == "grid-halo" else (OVERLAPPING, (0, 0))
    t, want, merged = stitch_task(tmp_path, rois, halo, threshold)
    assert merged > 0  # the test data has objects across borders
    unique = reference(t.inp, rois, halo, 0.6, "<u4", "unique", 1000)
    assert (want != unique).any()
    with mounted(roifs_bin, t.config) as m:
        z = zarr.open(str(m.path), mode="r")
        np.testing.assert_array_equal(z[32:64, 40:80], want[32:64, 40:80])  # a middle chunk
        assert m.status()["calls"] == len(rois)  # stitching needs every ROI, each once
        np.testing.assert_array_equal(z[...], want)
        assert m.status()["calls"] == len(rois)
    # clean --unused keeps the strips and the mapping (records of current results)
    r = run_roifs(roifs_bin, "clean", "--unused", t.config)
    assert r.returncode == 0, r.stderr
    r = run_roifs(roifs_bin, "check", t.config)
    assert "; 0 stale (no current ROI's" in r.stdout, r.stdout
    with mounted(roifs_bin, t.config) as m:  # the mapping is stored: nothing computed again
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
        assert m.status()["calls"] == 0
        assert "stitching:" not in m.log_text()


def test_stitch_two_processes(tmp_path, roifs_bin):
    t, want, _ = stitch_task(tmp_path, GRID, (6, 6), 0.5, delay="0.2")
    out = {}
    with mounted(roifs_bin, t.config, tmp_path / "m1") as m1, \
            mounted(roifs_bin, t.config, tmp_path / "m2") as m2:
        def read(m, key):
            out[key] = zarr.open(str(m.path), mode="r")[...]
        all_at_once(lambda: read(m1, 0), lambda: read(m2, 1))
        np.testing.assert_array_equal(out[0], want)
        np.testing.assert_array_equal(out[1], want)
        assert m1.status()["calls"] + m2.status()["calls"] == len(GRID)
        passes = ("stitching:" in m1.log_text()) + ("stitching:" in m2.log_text())
        assert passes == 1, (m1.log_text(), m2.log_text())


def test_stitch_kill_9_during_the_pass(tmp_path, roifs_bin):
    t, want, _ = stitch_task(tmp_path, GRID, (6, 6), 0.5, delay="0.3")
    done_before = done_before_kill_9(roifs_bin, t.config, tmp_path / "mnt", "1.1",
                                     tmp_path / "killed.log")
    assert 1 <= done_before < len(GRID)
    with mounted(roifs_bin, t.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
        st = m.status()
        assert 0 < st["calls"] <= len(GRID) - done_before
        assert st["rois"]["failed"] == 0
