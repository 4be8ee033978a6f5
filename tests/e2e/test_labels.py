"""Label outputs (docs/labels.md, [labels]): ids = keep | unique | sequential against a numpy
reference written from the formulas of docs/labels.md#how-ids-are-numbered, over overlapping ROIs
with a halo; laziness (unique: a chunk alone computes only its ROIs; sequential: reading only the
last chunk first on a fresh mount computes every ROI once); exactly once across a remount, two
processes on one cache and a kill -9 in the middle; the validation of the processor's values (a
negative id, an id >= block) and the refusals of check and mount (exit 2, "roifs: FILE:LINE:
...")."""
import os

import numpy as np
import pytest
import zarr
from scipy import ndimage

from conftest import all_at_once, done_before_kill_9, line_of, make_task, mounted, run_roifs

HALO = (3, 4)
SHAPE = (96, 120)
CHUNKS = (32, 40)
# overlapping ROIs in list order (later wins), one spanning chunks, one inside one chunk
ROIS = [((0, 40), (0, 50)), ((30, 70), (40, 100)), ((0, 32), (80, 120)), ((60, 96), (0, 64)),
        ((50, 96), (60, 120)), ((33, 40), (5, 20))]


def blobs(seed, shape=SHAPE):
    field = ndimage.gaussian_filter(np.random.default_rng(seed).standard_normal(shape), 3)
    return (field / field.std()).astype("<f4")


def reference(inp, rois, halo, value, dtype, ids, block=65536):
    """docs/labels.md#how-ids-are-numbered: each ROI's label image of its read region, cropped to its box; unique maps v
    of ROI r to r * block + v; sequential to sum(|D_s|, s < r) + rank of v in D_r, D_r the
    sorted distinct nonzero values inside the box; the last ROI wins."""
    out = np.zeros(inp.shape, dtype)
    total = 0
    for r, box in enumerate(rois):
        read = [(max(a - h, 0), min(b + h, s)) for (a, b), h, s in zip(box, halo, inp.shape)]
        lab, _ = ndimage.label(inp[tuple(slice(a, b) for a, b in read)] > value)
        inner = lab[tuple(slice(a - r0, b - r0) for (a, b), (r0, _) in zip(box, read))]
        inner = inner.astype(np.int64)
        if ids == "unique":
            inner = np.where(inner > 0, r * block + inner, 0)
        elif ids == "sequential":
            d = np.unique(inner[inner > 0])
            m = np.zeros(int(inner.max()) + 1, np.int64)
            m[d] = total + np.arange(1, len(d) + 1)
            inner = m[inner]
            total += len(d)
        out[tuple(slice(a, b) for a, b in box)] = inner
    return out


def label_task(tmp_path, ids, *, block=None, delay=None, dtype="<u4", rois=ROIS, seed=3,
               readahead=None):
    labels = {"ids": ids}
    if block is not None:
        labels["block"] = block
    process = {"builtin": "label", "param.value": "0.6"}
    if delay:
        process["param.delay"] = delay
    if readahead is not None:
        process["readahead"] = readahead
    t = make_task(tmp_path, blobs(seed), CHUNKS, rois=rois, process=process,
                  output={"dtype": dtype}, sections={"rois": {"halo": "%d,%d" % HALO},
                                                     "labels": labels})
    want = reference(t.inp, rois, HALO, 0.6, dtype, ids, block or 65536)
    return t, want


def last_chunk(a):
    return a[64:96, 80:120]


@pytest.mark.parametrize("ids", ["keep", "unique", "sequential"])
def test_ids_match_reference(tmp_path, roifs_bin, ids):
    t, want = label_task(tmp_path, ids, block=1000)
    if ids != "keep":  # the mapping is visible: ids differ from the processor's
        assert len(np.unique(want)) > len(np.unique(reference(
            t.inp, ROIS, HALO, 0.6, "<u4", "keep")))
    with mounted(roifs_bin, t.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
        assert got.dtype == np.dtype("<u4")
        np.testing.assert_array_equal(got, want)
        assert m.status()["calls"] == len(ROIS)


@pytest.mark.parametrize("ids", ["unique", "sequential"])
def test_last_chunk_first_on_a_fresh_mount(tmp_path, roifs_bin, ids):
    t, want = label_task(tmp_path, ids)
    with mounted(roifs_bin, t.config) as m:
        z = zarr.open(str(m.path), mode="r")
        np.testing.assert_array_equal(last_chunk(z), last_chunk(want))
        calls = m.status()["calls"]
        # the last chunk is touched by ROIs 1 and 4
        if ids == "unique":  # any chunk alone: only the ROIs touching it
            assert calls == 2
        else:  # sequential: every ROI up to the last one touching it (0..4), each once
            assert calls == 5
        np.testing.assert_array_equal(z[...], want)
        assert m.status()["calls"] == len(ROIS)
    with mounted(roifs_bin, t.config) as m:  # remount: nothing computed again
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
        assert m.status()["calls"] == 0


def test_sequential_needs_rois_up_to_the_last_touching_the_chunk(tmp_path, roifs_bin):
    """With ROIs 0..2: chunk (0, 0) is touched by ROI 0 only, which needs no earlier ROI;
    chunk (0, 2) by ROIs 1 and 2, which need ROI 0 too."""
    t, want = label_task(tmp_path, "sequential", rois=ROIS[:3], readahead=0)
    with mounted(roifs_bin, t.config) as m:
        z = zarr.open(str(m.path), mode="r")
        np.testing.assert_array_equal(z[0:32, 0:40], want[0:32, 0:40])
        assert m.status()["calls"] == 1
        np.testing.assert_array_equal(z[0:32, 80:120], want[0:32, 80:120])
        assert m.status()["calls"] == 3
        np.testing.assert_array_equal(z[...], want)
        assert m.status()["calls"] == 3


def test_sequential_two_processes_share_every_roi(tmp_path, roifs_bin):
    """Two mounts on one cache read in opposite orders at once: each ROI computed once in
    all (each mount's calls add up to the number of ROIs), both serve the reference."""
    t, want = label_task(tmp_path, "sequential", delay="0.3")
    out = {}
    with mounted(roifs_bin, t.config, tmp_path / "m1") as m1, \
            mounted(roifs_bin, t.config, tmp_path / "m2") as m2:
        def read(m, reverse, key):
            z = zarr.open(str(m.path), mode="r")
            got = np.zeros(SHAPE, "<u4")
            idx = [(i, j) for i in range(3) for j in range(3)]
            for i, j in (reversed(idx) if reverse else idx):
                s = (slice(32 * i, 32 * i + 32), slice(40 * j, 40 * j + 40))
                got[s] = z[s]
            out[key] = got
        all_at_once(lambda: read(m1, False, 1), lambda: read(m2, True, 2))
        np.testing.assert_array_equal(out[1], want)
        np.testing.assert_array_equal(out[2], want)
        assert m1.status()["calls"] + m2.status()["calls"] == len(ROIS)


def test_sequential_kill_9_then_remount(tmp_path, roifs_bin):
    """kill -9 while the last chunk computes the earlier ROIs; a remount finishes the job
    (ROIs finished before the kill are not computed again) and serves the reference."""
    t, want = label_task(tmp_path, "sequential", delay="0.4")
    # after 1 s some ROIs are done (0.4 s each), not all
    done_before = done_before_kill_9(roifs_bin, t.config, tmp_path / "mnt", "2.2",
                                     tmp_path / "calls.log")
    assert 1 <= done_before < 5
    with mounted(roifs_bin, t.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
        st = m.status()
        # what the killed mount finished is kept, nothing is computed twice by this one
        assert 0 < st["calls"] <= len(ROIS) - done_before
        assert st["rois"]["done"] == len(ROIS) and st["rois"]["failed"] == 0


def test_unique_ids_for_every_integer_dtype(tmp_path, roifs_bin):
    for dt in ["<i2", "<u2", "<i8", "<u8"]:
        t, want = label_task(tmp_path / dt, "unique", block=300, dtype=dt)
        with mounted(roifs_bin, t.config) as m:
            np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)


# ---------------------------------------------------------------- values that fail a ROI


def value_task(tmp_path, data, labels, dtype="<i2"):
    return make_task(tmp_path, data, (8, 8), rois=[((0, 8), (0, 8)), ((0, 8), (8, 16))],
                     process={"builtin": "copy"}, output={"dtype": dtype},
                     sections={"labels": labels})


@pytest.mark.parametrize("case", ["negative", "beyond-block"])
def test_bad_values_fail_the_roi(tmp_path, roifs_bin, case):
    data = np.zeros((8, 16), "<i2")
    data[2, 3] = 5
    data[1, 9] = 7
    if case == "negative":
        data[4, 12] = -5
        t = value_task(tmp_path, data, {"ids": "keep"})
        needle = "label value -5"
    else:
        data[4, 12] = 150
        t = value_task(tmp_path, data, {"ids": "unique", "block": "100"})
        needle = "label value 150"
    with mounted(roifs_bin, t.config) as m:
        got = np.fromfile(m / "0.0", "<i2").reshape(8, 8)  # the good ROI is served
        np.testing.assert_array_equal(got, data[:, :8])
        with pytest.raises(OSError) as e:
            (m / "0.1").read_bytes()
        assert e.value.errno == 5  # EIO
        st = m.status()
        assert st["rois"]["failed"] == 1
        assert any(needle in x["message"] and x["roi"] == 1 for x in st["errors"]), st
    r = run_roifs(roifs_bin, "warm", t.config)
    assert r.returncode == 1 and needle in r.stderr


# ---------------------------------------------------------------- refusals (exit 2)


def refused(tmp_path, roifs_bin, labels, output, key, needle):
    t = make_task(tmp_path, np.zeros((8, 16), "<u2"), (8, 8),
                  rois=[((0, 8), (0, 8)), ((0, 8), (8, 16))], process={"builtin": "copy"},
                  output=output, sections={"labels": labels})
    line = line_of(t.config, rf"^{key} =")
    for cmd in (("check", t.config), ("mount", t.config, t.mnt)):
        t.mnt.mkdir(exist_ok=True)
        r = run_roifs(roifs_bin, *cmd)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"roifs: {t.config}:{line}: "), r.stderr
        assert needle in r.stderr, r.stderr
    assert not os.listdir(t.mnt)


def test_block_that_does_not_fit_the_dtype(tmp_path, roifs_bin):
    # 2 ROIs of 128 ids: ids up to 255 fit |u1; 129 each do not
    refused(tmp_path, roifs_bin, {"ids": "unique", "block": "129"}, {"dtype": "|u1"}, "block",
            "ids up to 257")
    t = make_task(tmp_path / "ok", np.zeros((8, 16), "<u2"), (8, 8),
                  rois=[((0, 8), (0, 8)), ((0, 8), (8, 16))], process={"builtin": "copy"},
                  output={"dtype": "|u1"}, sections={"labels": {"ids": "unique", "block": "128"}})
    assert run_roifs(roifs_bin, "check", t.config).returncode == 0


def test_default_block_too_large_for_the_dtype(tmp_path, roifs_bin):
    """The default block (65536) does not fit |u1: refused at the ids line."""
    refused(tmp_path, roifs_bin, {"ids": "unique"}, {"dtype": "|u1"}, "ids",
            "[labels] block: 65536 ids for each of 2 ROIs need ids up to 131071")


def test_huge_block(tmp_path, roifs_bin):
    refused(tmp_path, roifs_bin, {"ids": "unique", "block": str(2 ** 63)}, {"dtype": "<u8"},
            "block", "beyond 2^64")


def test_float_output_dtype(tmp_path, roifs_bin):
    refused(tmp_path, roifs_bin, {"ids": "keep"}, {"dtype": "<f4"}, "dtype",
            "not an integer type")


def test_stitch_needs_unique(tmp_path, roifs_bin):
    refused(tmp_path, roifs_bin, {"ids": "sequential", "stitch": "iou"}, {"dtype": "<u4"},
            "stitch", "needs ids = unique")


@pytest.mark.parametrize("key,value,needle", [
    ("ids", "dense", "unknown value 'dense' (expected keep, unique or sequential)"),
    ("block", "0", "'0' is not an integer of at least 1"),
    ("block", "-3", "is not an integer of at least 1"),
    ("stitch", "yes", "expected none or iou"),
    ("stitch_iou", "0", "is not a number above 0 and at most 1"),
    ("stitch_iou", "1.5", "is not a number above 0 and at most 1"),
    ("colour", "red", "unknown key 'colour' in [labels]"),
])
def test_bad_keys(tmp_path, roifs_bin, key, value, needle):
    refused(tmp_path, roifs_bin, {key: value}, {"dtype": "<u4"}, key, needle)
