"""Masked ROIs (docs/masks.md): `@ L` lines with [rois] mask, and masking ROI tables (legacy
Fractal AnnData, ngio v1 AnnData and csv) with the label image their region names. Against a numpy
reference of the rules of docs/masks.md: only pixels with mask == L inside a ROI's box take its
result, the mask scaled by nearest neighbour, mask_input zero | keep, outside fill | input, later
ROIs winning; each ROI computed once; the label handed to python, worker and command processors; an
edit of the mask recomputes exactly the ROIs whose mask region changed; every refusal."""
import json
import os
import sys

import numpy as np
import pytest
import zarr

from conftest import line_of, make_task, mounted, run_roifs

SHAPE = (64, 80)
CHUNKS = (32, 40)
HALO = (2, 3)
# (box, label): overlapping boxes, one label used twice, one box across four chunks
ROIS = [(((0, 40), (0, 50)), 1), (((20, 64), (30, 80)), 2), (((10, 50), (10, 70)), 3),
        (((0, 64), (0, 80)), 1), (((34, 60), (44, 76)), 2)]
PY = sys.executable if sys.executable.startswith("/usr/bin/") else "/usr/bin/python3"

# the processor: the read region's sum (what mask_input changes) plus 1000 * label, everywhere
PROC_PY = """import numpy as np

def f(block, roi):
    v = int(block.astype(np.int64).sum()) % 1000 + 1000 * (roi.label or 0)
    return np.full(block.shape, v, roi.out_dtype)
"""


def label_image(shape, seed=5):
    """Objects 1, 2, 3 (and background) in blocks of 4 x 5 pixels: every ROI's box holds
    pixels of its own label and of others."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 4, (shape[0] // 4 + 1, shape[1] // 5 + 1))
    return np.kron(coarse, np.ones((4, 5), int))[:shape[0], :shape[1]].astype("<u2")


def scaled(mask, shape):
    """docs/masks.md: element p of the output is mask[floor(p_d * M_d / O_d)]."""
    idx = [np.arange(o) * m // o for o, m in zip(shape, mask.shape)]
    return mask[np.ix_(*idx)]


def f_ref(block, label):
    return int(block.astype(np.int64).sum()) % 1000 + 1000 * label


def reference(inp, mask, rois, halo=HALO, *, outside="fill", mask_input="zero", fill=0):
    full = scaled(mask, inp.shape)
    out = inp.astype("<i4").copy() if outside == "input" else np.full(inp.shape, fill, "<i4")
    for box, lab in rois:
        read = tuple(slice(max(a - h, 0), min(b + h, s))
                     for (a, b), h, s in zip(box, halo, inp.shape))
        blk = inp[read].astype(np.int64)
        if mask_input == "zero":
            blk = np.where(full[read] == lab, blk, 0)
        b = tuple(slice(a, z) for a, z in box)
        sel = full[b] == lab
        out[b][sel] = f_ref(blk, lab)
    return out


def roi_line(box, lab):
    return ", ".join(f"{a}:{b}" for a, b in box) + f" @ {lab}"


def write_mask(path, data, chunks=(16, 20)):
    z = zarr.open(str(path), mode="w", shape=data.shape, chunks=chunks, dtype=data.dtype)
    z[...] = data
    return path


def masked_task(tmp_path, mask, *, rois=ROIS, outside="fill", mask_input=None, process=None,
                sections=None):
    inp = np.random.default_rng(1).integers(0, 10, SHAPE).astype("<i4")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "f.py").write_text(PROC_PY)
    write_mask(tmp_path / "mask.zarr", mask)
    r = {"halo": "%d,%d" % HALO, "mask": "mask.zarr", "mask_input": mask_input}
    secs = {"rois": r, **(sections or {})}
    return make_task(tmp_path, inp, CHUNKS, rois=[], roi_lines=[roi_line(*x) for x in rois],
                     process=process or {"python": "f.py:f", "threads": 2},
                     output={"outside": outside, "dtype": "<i4"}, sections=secs)


@pytest.mark.parametrize("mask_shape", [SHAPE, (16, 20), (32, 27)], ids=["same", "coarser",
                                                                          "uneven"])
@pytest.mark.parametrize("outside", ["fill", "input"])
@pytest.mark.parametrize("mask_input", ["zero", "keep"])
def test_masked_rois_match_reference(tmp_path, roifs_bin, mask_shape, outside, mask_input):
    mask = label_image(mask_shape)
    t = masked_task(tmp_path, mask, outside=outside, mask_input=mask_input)
    want = reference(t.inp, mask, ROIS, outside=outside, mask_input=mask_input)
    # the masks matter: pasting whole boxes, or reading unmasked input, gives another array
    assert not np.array_equal(want, reference(t.inp, np.ones_like(mask), [(b, 1) for b, _ in ROIS],
                                              outside=outside))
    other = "keep" if mask_input == "zero" else "zero"
    assert not np.array_equal(want, reference(t.inp, mask, ROIS, outside=outside,
                                              mask_input=other))
    with mounted(roifs_bin, t.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
        assert m.status()["calls"] == len(ROIS)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("compressor", ["none", "zstd"])
def test_masked_rois_that_are_the_chunks(tmp_path, roifs_bin, compressor):
    """Masked ROIs whose boxes are exactly the chunks (one per chunk, tiling the array): the
    pixels outside each object still show the fill value. A chunk whose ROIs tile it, or that
    is its only ROI's box, skips the fill or is encoded from the result as it is; a masked ROI
    must not take those shortcuts."""
    mask = label_image(SHAPE)
    boxes = [((y, y + CHUNKS[0]), (x, x + CHUNKS[1]))
             for y in range(0, SHAPE[0], CHUNKS[0]) for x in range(0, SHAPE[1], CHUNKS[1])]
    rois = [(b, lab) for b, lab in zip(boxes, [1, 2, 3, 1])]
    inp = np.random.default_rng(1).integers(0, 10, SHAPE).astype("<i4")
    (tmp_path / "f.py").write_text(PROC_PY)
    write_mask(tmp_path / "mask.zarr", mask)
    t = make_task(tmp_path, inp, CHUNKS, rois=[], roi_lines=[roi_line(*x) for x in rois],
                  process={"python": "f.py:f", "threads": 2},
                  output={"dtype": "<i4", "fill_value": 7, "compressor": compressor},
                  sections={"rois": {"mask": "mask.zarr"}})
    want = reference(inp, mask, rois, (0, 0), fill=7)
    assert (want == 7).sum() > 100
    # computed, then assembled again from the stored results (the chunk files deleted)
    for _ in range(2):
        with mounted(roifs_bin, t.config) as m:
            np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
            assert m.status()["calls"] in (len(rois), 0)
        cache = tmp_path / "cache"
        for f in cache.rglob("*"):
            if f.is_file() and "chunks" in f.relative_to(cache).parts[:1]:
                f.unlink()


def test_unmasked_and_masked_rois_mix(tmp_path, roifs_bin):
    """A line without a label is an ordinary ROI (its whole box), a later masked one writes
    only its object over it."""
    mask = label_image(SHAPE)
    t = masked_task(tmp_path, mask)
    t.rois_file.write_text("0:64, 0:80\n10:50, 10:70 @ 3\n")
    full = np.zeros(SHAPE, "<i4") + f_ref(t.inp, 0)
    read = (slice(8, 52), slice(7, 73))
    blk = np.where(mask[read] == 3, t.inp[read], 0)
    box = (slice(10, 50), slice(10, 70))
    full[box][mask[box] == 3] = f_ref(blk, 3)
    with mounted(roifs_bin, t.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], full)
        assert m.status()["calls"] == 2


def test_label_reaches_worker_and_command(tmp_path, roifs_bin):
    """The worker request's "label" and a command's ROIFS_LABEL carry L
    (docs/masks.md#what-the-processor-sees)."""
    mask = label_image(SHAPE)
    (tmp_path / "w.py").write_text(
        "import numpy as np\nfrom roifs.worker import run\n\n" + PROC_PY.split("\n", 1)[1] +
        "\nrun(f)\n")
    t = masked_task(tmp_path, mask, process={"worker": f"{PY} w.py", "threads": 2})
    want = reference(t.inp, mask, ROIS)
    with mounted(roifs_bin, t.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
        assert m.status()["calls"] == len(ROIS)
    log = tmp_path / "labels.log"
    cmd = f'echo "$ROIFS_ROI $ROIFS_LABEL" >> {log}; cat'
    t2 = masked_task(tmp_path / "cmd", mask, process={"command": cmd, "threads": 1},
                     mask_input="keep")
    with mounted(roifs_bin, t2.config) as m:
        zarr.open(str(m.path), mode="r")[...]
    got = sorted(tuple(map(int, line.split())) for line in log.read_text().splitlines())
    assert got == [(i, lab) for i, (_, lab) in enumerate(ROIS)]


def test_sequential_ids_count_only_the_object(tmp_path, roifs_bin):
    """[labels] ids = sequential with masked ROIs: D_r is the set of ids ROI r writes, those of
    its object's pixels (docs/masks.md), so the ids stay dense."""
    mask = label_image(SHAPE)
    rois = [(((0, 40), (0, 50)), 1), (((20, 64), (30, 80)), 2)]
    t = masked_task(tmp_path, mask, rois=rois, process={"builtin": "label",
                                                        "param.value": "4"},
                    sections={"labels": {"ids": "sequential"}}, mask_input="keep")
    with mounted(roifs_bin, t.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
        assert m.status()["calls"] == 2
    from scipy import ndimage
    want = np.zeros(SHAPE, "<i4")
    total = 0
    for box, lab in rois:
        read = tuple(slice(max(a - h, 0), min(b + h, s)) for (a, b), h, s in zip(box, HALO, SHAPE))
        lab_img, _ = ndimage.label(t.inp[read] > 4)
        b = tuple(slice(a, z) for a, z in box)
        inner = lab_img[tuple(slice(s.start - r.start, s.stop - r.start) for s, r in zip(b, read))]
        sel = mask[b] == lab
        inner = np.where(sel, inner, 0)
        d = np.unique(inner[inner > 0])
        mp = np.zeros(int(inner.max()) + 1, np.int64)
        mp[d] = total + np.arange(1, len(d) + 1)
        total += len(d)
        want[b][sel] = mp[inner][sel]
    np.testing.assert_array_equal(got, want)
    assert set(np.unique(got)) == set(range(total + 1))  # dense: no id of a pixel not written


def test_mask_edit_recomputes_only_the_rois_it_reaches(tmp_path, roifs_bin):
    """docs/masks.md#changes-and-caching: a masked ROI's key covers its label and the mask chunks it reads. Mask chunks
    of 16 x 20: ROI 0 (read region rows 0:12, cols 0:15) is the only one reading mask chunk
    (0, 0); rewriting that chunk recomputes ROI 0 alone, changing one line's label that line
    alone, and mask_input every ROI."""
    rois = [(((0, 10), (0, 12)), 1), (((20, 40), (30, 60)), 2), (((44, 64), (50, 80)), 3)]
    mask = label_image(SHAPE)
    t = masked_task(tmp_path, mask, rois=rois, mask_input="zero")
    with mounted(roifs_bin, t.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...],
                                      reference(t.inp, mask, rois))
        assert m.status()["calls"] == 3
    edited = mask.copy()
    edited[0:16, 0:20] = np.where(mask[0:16, 0:20] == 1, 2, 1)
    want = reference(t.inp, edited, rois)
    assert not np.array_equal(want, reference(t.inp, mask, rois))
    zarr.open(str(tmp_path / "mask.zarr"), mode="r+")[0:16, 0:20] = edited[0:16, 0:20]
    with mounted(roifs_bin, t.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
        assert m.status()["calls"] == 1
    relabelled = [rois[0], (rois[1][0], 3), rois[2]]
    t.rois_file.write_text("".join(roi_line(b, lab) + "\n" for b, lab in relabelled))
    with mounted(roifs_bin, t.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...],
                                      reference(t.inp, edited, relabelled))
        assert m.status()["calls"] == 1
    t.config.write_text(t.config.read_text().replace("mask_input = zero", "mask_input = keep"))
    with mounted(roifs_bin, t.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...],
                                      reference(t.inp, edited, relabelled, mask_input="keep"))
        assert m.status()["calls"] == 3


# ---------------------------------------------------------------- masking ROI tables

SCALE = (0.5, 0.25)  # micrometres per pixel (y, x) at level 0


def write_image(path, data, levels=2):
    """An OME-Zarr 0.4 image (y, x) with `levels` levels, each half the one before."""
    g = zarr.open_group(str(path), mode="w")
    datasets = []
    for lv in range(levels):
        a = data[::2 ** lv, ::2 ** lv]
        z = g.create_dataset(str(lv), shape=a.shape, chunks=(32, 40), dtype=a.dtype)
        z[...] = a
        datasets.append({"path": str(lv), "coordinateTransformations": [
            {"type": "scale", "scale": [SCALE[0] * 2 ** lv, SCALE[1] * 2 ** lv]}]})
    g.attrs["multiscales"] = [{"version": "0.4", "name": "img", "datasets": datasets,
                               "axes": [{"name": "y", "type": "space", "unit": "micrometer"},
                                        {"name": "x", "type": "space", "unit": "micrometer"}]}]
    return g


def write_label_image(img, name, arrays, levels):
    """labels/NAME: a label image, level k the array arrays[k] at levels[k] times level 0's
    pixel size (the arrays independent: which level is read shows in the result)."""
    lg = zarr.open_group(str(img / "labels"), mode="a")
    lg.attrs["labels"] = [name]
    g = lg.create_group(name)
    datasets = []
    for k, (f, a) in enumerate(zip(levels, arrays)):
        z = g.create_dataset(str(k), shape=a.shape, chunks=(16, 20), dtype=a.dtype)
        z[...] = a
        datasets.append({"path": str(k), "coordinateTransformations": [
            {"type": "scale", "scale": [SCALE[0] * f, SCALE[1] * f]}]})
    g.attrs["multiscales"] = [{"version": "0.4", "name": name, "datasets": datasets,
                               "axes": [{"name": "y", "type": "space"},
                                        {"name": "x", "type": "space"}]}]
    g.attrs["image-label"] = {"version": "0.4", "source": {"image": "../../"}}


def table_rows(rois, scale):
    """ROI boxes (pixels of a level of that scale) as table rows in micrometres."""
    rows = []
    for ((y0, y1), (x0, x1)), lab in rois:
        rows.append({"x_micrometer": x0 * scale[1], "y_micrometer": y0 * scale[0],
                     "z_micrometer": 0.0, "len_x_micrometer": (x1 - x0) * scale[1],
                     "len_y_micrometer": (y1 - y0) * scale[0], "len_z_micrometer": 1.0,
                     "label": lab})
    return rows


def write_table(img, name, rows, flavour, region):
    import anndata as ad
    import pandas as pd
    tdir = img / "tables" / name
    tg = zarr.open_group(str(img / "tables"), mode="a")
    tg.attrs["tables"] = [name]
    df = pd.DataFrame(rows)
    cols = ["x_micrometer", "y_micrometer", "z_micrometer", "len_x_micrometer",
            "len_y_micrometer", "len_z_micrometer"]
    if flavour == "fractal":  # fractal-tasks-core v1: every column (label too) in float X
        df.index = df.index.astype(str)
        ad.AnnData(df.astype("float32")).write_zarr(str(tdir))
        attrs = {"type": "masking_roi_table", "fractal_table_version": "1",
                 "region": {"path": region}, "instance_key": "label"}
    elif flavour == "obs":  # the label an integer column of obs
        obs = pd.DataFrame({"label": [r["label"] for r in rows]},
                           index=[str(i) for i in range(len(rows))])
        ad.AnnData(X=df[cols].to_numpy("float32"), obs=obs,
                   var=pd.DataFrame(index=cols)).write_zarr(str(tdir))
        attrs = {"type": "masking_roi_table", "table_version": "1", "region": {"path": region},
                 "instance_key": "label"}
    elif flavour == "ngio":  # ngio v1, anndata: the label is the obs index
        obs = pd.DataFrame(index=pd.Index([str(r["label"]) for r in rows], name="label"))
        ad.AnnData(X=df[cols].to_numpy("float32"), obs=obs,
                   var=pd.DataFrame(index=cols)).write_zarr(str(tdir))
        attrs = {"type": "masking_roi_table", "table_version": "1", "backend": "anndata",
                 "region": {"path": region}, "instance_key": "label", "index_key": "label",
                 "index_type": "int"}
    else:  # ngio v1, csv
        tdir.mkdir(parents=True)
        df[["label"] + cols].to_csv(tdir / "table.csv", index=False)
        attrs = {"type": "masking_roi_table", "table_version": "1", "backend": "csv",
                 "region": {"path": region}, "instance_key": "label", "index_key": "label",
                 "index_type": "int"}
    zattrs = tdir / ".zattrs"
    old = json.loads(zattrs.read_text()) if zattrs.exists() else {}
    if not (tdir / ".zgroup").exists():
        (tdir / ".zgroup").write_text('{"zarr_format": 2}')
    zattrs.write_text(json.dumps({**old, **attrs}))


@pytest.mark.parametrize("flavour", ["fractal", "ngio", "obs", "csv"])
def test_masking_table_as_rois(tmp_path, roifs_bin, flavour):
    """A masking table at level 1 of an image: each row a masked ROI with its label, the mask
    the label image its region names, at the level of the input's scale (level 1 of the
    label image, whose level 0 would give another result)."""
    data = np.random.default_rng(2).integers(0, 10, (128, 160)).astype("<i4")
    write_image(tmp_path / "img.zarr", data)
    l0, l1 = label_image((128, 160), seed=9), label_image((64, 80), seed=10)
    write_label_image(tmp_path / "img.zarr", "org", [l0, l1], [1, 2])
    rois = ROIS
    scale1 = (SCALE[0] * 2, SCALE[1] * 2)
    write_table(tmp_path / "img.zarr", "org_ROI_table", table_rows(rois, scale1), flavour,
                "../labels/org")
    (tmp_path / "f.py").write_text(PROC_PY)
    inp = data[::2, ::2]
    from mounting import write_config
    write_config(tmp_path / "task.ini", {
        "input": {"path": "img.zarr", "level": 1},
        "rois": {"table": "img.zarr/tables/org_ROI_table", "halo": "%d,%d" % HALO},
        "process": {"python": "f.py:f", "threads": 2}, "output": {"dtype": "<i4"},
        "cache": {"dir": tmp_path / "cache"}})
    want = reference(inp, l1, rois)
    assert not np.array_equal(want, reference(inp, l0, rois))
    with mounted(roifs_bin, tmp_path / "task.ini") as m:
        got = zarr.open(str(m.path), mode="r")[...]
        assert m.status()["calls"] == len(rois)
    np.testing.assert_array_equal(got, want)


def test_label_image_nearest_finer_level(tmp_path, roifs_bin):
    """No level of the label image has the input's scale: the nearest finer one (factor 1 of
    1 and 4, for an input at factor 2) is read and scaled."""
    data = np.random.default_rng(2).integers(0, 10, (128, 160)).astype("<i4")
    write_image(tmp_path / "img.zarr", data)
    l0, l2 = label_image((128, 160), seed=4), label_image((32, 40), seed=6)
    write_label_image(tmp_path / "img.zarr", "org", [l0, l2], [1, 4])
    (tmp_path / "f.py").write_text(PROC_PY)
    (tmp_path / "rois.txt").write_text("".join(roi_line(*x) + "\n" for x in ROIS))
    from mounting import write_config
    write_config(tmp_path / "task.ini", {
        "input": {"path": "img.zarr", "level": 1},
        "rois": {"file": "rois.txt", "halo": "%d,%d" % HALO, "mask": "img.zarr/labels/org"},
        "process": {"python": "f.py:f", "threads": 2}, "output": {"dtype": "<i4"},
        "cache": {"dir": tmp_path / "cache"}})
    inp = data[::2, ::2]
    want = reference(inp, l0, ROIS)
    assert not np.array_equal(want, reference(inp, l2, ROIS))
    r = run_roifs(roifs_bin, "check", tmp_path / "task.ini")
    assert r.returncode == 0, r.stderr
    assert f"mask:      {tmp_path}/img.zarr/labels/org/0 shape [128, 160] (5 masked ROIs, " \
        "mask_input zero)" in r.stdout, r.stdout
    with mounted(roifs_bin, tmp_path / "task.ini") as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)


# ---------------------------------------------------------------- refusals


def check_fails(roifs_bin, config, where, message):
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 2, r.stderr
    assert f"roifs: {where}: {message}" in r.stderr, r.stderr


def test_label_without_mask_is_refused(tmp_path, roifs_bin):
    t = masked_task(tmp_path, label_image(SHAPE))
    text = t.config.read_text().replace("mask = mask.zarr\n", "")
    t.config.write_text(text.replace("mask_input = None\n", ""))
    check_fails(roifs_bin, t.config, f"{t.rois_file}:1",
                "a label (@ 1) needs [rois] mask (the label image)")


@pytest.mark.parametrize("label, message", [
    ("0", "label 0 is the background (labels are positive integers)"),
    ("-3", "label '-3' is not a positive integer"),
    ("2.5", "label '2.5' is not a positive integer"),
    ("x", "label 'x' is not a positive integer"),
    ("", "'@' without a label (expected @ LABEL, a positive integer)"),
    ("18446744073709551616", "label '18446744073709551616' is too large"),
])
def test_bad_label_is_refused(tmp_path, roifs_bin, label, message):
    t = masked_task(tmp_path, label_image(SHAPE))
    t.rois_file.write_text("0:10, 0:10 @ 1\n# a comment\n0:10, 0:10 @ " + label + "\n")
    check_fails(roifs_bin, t.config, f"{t.rois_file}:3", message)


def test_mask_refusals(tmp_path, roifs_bin):
    t = masked_task(tmp_path, label_image(SHAPE))
    line = line_of(t.config, "^mask =")
    where = f"{t.config}:{line}"
    write_mask(tmp_path / "mask.zarr", np.zeros((4,) + SHAPE, "<u2"), chunks=(1, 16, 20))
    check_fails(roifs_bin, t.config, where, "[rois] mask: the mask %s has 3 dimensions, the "
                "output 2" % (tmp_path / "mask.zarr"))
    write_mask(tmp_path / "mask.zarr", label_image(SHAPE).astype("<f4"))
    check_fails(roifs_bin, t.config, where, "[rois] mask: the mask %s has dtype <f4; a label "
                "image needs an integer dtype" % (tmp_path / "mask.zarr"))
    import shutil
    shutil.rmtree(tmp_path / "mask.zarr")
    r = run_roifs(roifs_bin, "check", t.config)
    assert r.returncode == 2 and f"roifs: {where}: [rois] mask: the mask: " in r.stderr, r.stderr
    assert str(tmp_path / "mask.zarr") in r.stderr


def test_watch_and_stitch_with_masks_are_refused(tmp_path, roifs_bin):
    t = masked_task(tmp_path, label_image(SHAPE), sections={"input": {"watch": "true"}})
    check_fails(roifs_bin, t.config, f"{t.config}:{line_of(t.config, '^watch =')}",
                "[input] watch: masked ROIs do not follow changes of their mask")
    t = masked_task(tmp_path / "s", label_image(SHAPE), process={"builtin": "label"},
                    sections={"labels": {"ids": "unique", "stitch": "iou"}})
    check_fails(roifs_bin, t.config, f"{t.config}:{line_of(t.config, '^stitch =')}",
                "[labels] stitch = iou cannot stitch masked ROIs")


def test_masking_table_without_region_is_refused(tmp_path, roifs_bin):
    data = np.zeros((64, 80), "<i4")
    write_image(tmp_path / "img.zarr", data, levels=1)
    write_table(tmp_path / "img.zarr", "t", table_rows(ROIS[:1], SCALE), "csv", "../labels/x")
    zattrs = tmp_path / "img.zarr/tables/t/.zattrs"
    a = json.loads(zattrs.read_text())
    del a["region"]
    zattrs.write_text(json.dumps(a))
    from mounting import write_config
    cfg = write_config(tmp_path / "task.ini", {
        "input": {"path": "img.zarr"}, "rois": {"table": "img.zarr/tables/t"},
        "process": {"builtin": "copy"}, "cache": {"dir": tmp_path / "cache"}})
    check_fails(roifs_bin, cfg, f"{cfg}:{line_of(cfg, '^table =')}",
                "[rois] table: the masking table names no label image (region.path): set "
                "[rois] mask")
    # a region naming nothing: the missing label image is refused
    a["region"] = {"path": "../labels/none"}
    zattrs.write_text(json.dumps(a))
    r = run_roifs(roifs_bin, "check", cfg)
    assert r.returncode == 2 and "[rois] table: the mask: " in r.stderr, r.stderr
    # rows that select nothing: refused as for any table (and nothing of the region leaks:
    # the sanitizer build exits otherwise)
    csv = tmp_path / "img.zarr/tables/t/table.csv"
    csv.write_text(csv.read_text().replace("\n1,0.0,", "\n1,1000.0,"))
    r = run_roifs(roifs_bin, "check", cfg)
    assert r.returncode == 2 and "no row selects any element of the image" in r.stderr, r.stderr
