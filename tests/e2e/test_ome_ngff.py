"""OME-NGFF and Zarr metadata conformance of `[output] ome = true`
(docs/ome-fractal.md#ome-zarr-output): the image group a mount presents keeps every MUST of
OME-NGFF 0.4 (format 2) and 0.5 (format 3), and the SHOULDs the strict schemas require, as checked
by ngff_check.py, for 2-D to 5-D images with and without OME input metadata; every level's
dimension names (zarr.json dimension_names, or _ARRAY_DIMENSIONS for format 2) are the axes names;
inputs that cannot make valid OME axes are refused with exit status 2. Without `ome`, dimension
names survive a change of format: a v3 input's dimension_names become _ARRAY_DIMENSIONS in a format
2 output (so xarray opens it) and the other way round."""
import json

import numpy as np
import pytest
import zarr

from conftest import line_of, make_task, mounted, run_roifs, write_config
from ngff_check import check_image

AXES = [{"name": "t", "type": "time", "unit": "second"},
        {"name": "c", "type": "channel"},
        {"name": "z", "type": "space", "unit": "micrometer"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}]
GENERIC = ["t", "c", "z", "y", "x"]


def shape_of(nd):
    return (2,) * (nd - 2) + (40, 36)


def chunks_of(nd):
    return (1,) * (nd - 2) + (16, 16)


def write_v3_array(path, data, chunks, dimension_names=None, attributes=None):
    """An uncompressed Zarr v3 array written by hand (Debian's zarr-python writes only v2)."""
    path.mkdir(parents=True)
    meta = {"zarr_format": 3, "node_type": "array", "shape": list(data.shape),
            "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": attributes or {}}
    if dimension_names is not None:
        meta["dimension_names"] = dimension_names
    (path / "zarr.json").write_text(json.dumps(meta))
    for idx in np.ndindex(*[-(-s // c) for s, c in zip(data.shape, chunks)]):
        block = np.zeros(chunks, data.dtype)
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, data.shape))
        block[tuple(slice(0, s.stop - s.start) for s in sl)] = data[sl]
        p = path / "c" / "/".join(map(str, idx))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(block.tobytes())


def ome_input(root, nd, version, axes=None):
    """An OME-Zarr image (0.4: Zarr v2 with .zattrs; 0.5: Zarr v3 with attributes.ome) of
    nd dimensions with one dataset "0": returns (image path, data, axes)."""
    axes = axes if axes is not None else AXES[5 - nd:]
    data = np.random.default_rng(nd).integers(0, 1000, shape_of(nd)).astype("<u2")
    scale = [0.5 if isinstance(a, dict) and a.get("type") == "space" else 1.0 for a in axes]
    ms = {"axes": axes, "name": "input",
          "datasets": [{"path": "0", "coordinateTransformations": [
              {"type": "scale", "scale": scale}]}]}
    img = root / "img.zarr"
    if version == "0.4":
        g = zarr.open_group(str(img), mode="w")
        z = g.create_dataset("0", shape=data.shape, chunks=chunks_of(nd), dtype=data.dtype)
        z[...] = data
        g.attrs["multiscales"] = [{**ms, "version": "0.4"}]
    else:
        write_v3_array(img / "0", data, chunks_of(nd), [a["name"] for a in axes])
        (img / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "group",
            "attributes": {"ome": {"version": "0.5", "multiscales": [ms]}}}))
    return img, data, axes


def ome_config(tmp_path, path, nd, fmt, levels=3, level_key=True):
    write_config(tmp_path / "task.ini", {
        "input": {"path": path},
        "rois": {"grid": ",".join(map(str, chunks_of(nd)))},
        "process": {"builtin": "add", "threads": 2},
        "output": {"ome": "true", "format": fmt, "levels": levels},
        "cache": {"dir": tmp_path / "cache"}})
    return tmp_path / "task.ini"


def level_names(mnt, fmt, level):
    """The dimension names a reader sees on one level: dimension_names (format 3) or
    _ARRAY_DIMENSIONS (format 2); None when absent."""
    if fmt == 3:
        return json.loads((mnt / str(level) / "zarr.json").read_text()).get("dimension_names")
    return json.loads((mnt / str(level) / ".zattrs").read_text()).get("_ARRAY_DIMENSIONS")


def multiscale(mnt, fmt):
    if fmt == 3:
        return json.loads((mnt / "zarr.json").read_text())["attributes"]["ome"]["multiscales"][0]
    return json.loads((mnt / ".zattrs").read_text())["multiscales"][0]


@pytest.mark.parametrize("source", ["plain", "ome"])
@pytest.mark.parametrize("nd", [2, 3, 4, 5])
@pytest.mark.parametrize("fmt", [2, 3])
def test_ome_output_conforms(tmp_path, roifs_bin, fmt, nd, source):
    """2-D to 5-D, 0.4 and 0.5, with generic axes (no OME input) and with the input's axes
    (an OME input of the same version): no violation of the MUST rules or of the strict
    schemas' SHOULDs, and every level names its dimensions as the axes do."""
    if source == "ome":
        path, data, axes = ome_input(tmp_path, nd, "0.4" if fmt == 2 else "0.5")
        want = [a["name"] for a in axes]
        config = ome_config(tmp_path, path / "0", nd, fmt)
    else:
        data = np.arange(np.prod(shape_of(nd)), dtype="<u2").reshape(shape_of(nd))
        want = GENERIC[5 - nd:]
        task = make_task(tmp_path, data, chunks_of(nd), rois=[], roi_lines=[],
                         sections={"rois": {"file": None,
                                            "grid": ",".join(map(str, chunks_of(nd)))}},
                         process={"builtin": "add"},
                         output={"ome": "true", "format": fmt, "levels": 3})
        config = task.config
    with mounted(roifs_bin, config, tmp_path / "mnt") as m:
        problems = check_image(m.path, strict=True, dimension_names=True)
        ms = multiscale(m.path, fmt)
        names = [level_names(m.path, fmt, lv) for lv in range(3)]
        top = zarr.open(str(m.path / "0"), mode="r")[...] if fmt == 2 else None
    assert problems == [], "\n".join(problems)
    assert [a["name"] for a in ms["axes"]] == want
    assert names == [want] * 3
    assert ms["metadata"]["method"] == "roifs downsample = mean"
    if top is not None:
        np.testing.assert_array_equal(top, data + 1)


@pytest.mark.parametrize("fmt", [2, 3])
def test_dimension_names_follow_the_axes(tmp_path, roifs_bin, fmt):
    """An input whose dimension names differ from the axes (a v3 input with dimension_names
    ["row", "col"]; a v2 input with _ARRAY_DIMENSIONS ["p", "q", "r"]): every level names its
    dimensions as the axes do, never as the input does."""
    data = np.arange(40 * 36, dtype="<u2").reshape(40, 36)
    write_v3_array(tmp_path / "v3.zarr", data, (16, 16), ["row", "col"])
    ome_config(tmp_path, tmp_path / "v3.zarr", 2, fmt)
    with mounted(roifs_bin, tmp_path / "task.ini", tmp_path / "mnt") as m:
        got = [level_names(m.path, fmt, lv) for lv in range(3)]
        problems = check_image(m.path)
    assert got == [["y", "x"]] * 3 and problems == [], (got, problems)

    sub = tmp_path / "v2"
    sub.mkdir()
    task = make_task(sub, np.zeros((2, 40, 36), "<u2"), (1, 16, 16), rois=[((0, 2), (0, 40),
                                                                           (0, 36))],
                     attrs={"_ARRAY_DIMENSIONS": ["p", "q", "r"]},
                     output={"ome": "true", "format": fmt, "levels": 2})
    with mounted(roifs_bin, task.config, task.mnt) as m:
        got = [level_names(m.path, fmt, lv) for lv in range(2)]
        zattrs0 = json.loads((m.path / "0" / (".zattrs" if fmt == 2 else "zarr.json"))
                             .read_text())
    assert got == [["z", "y", "x"]] * 2, got
    if fmt == 3:  # moved to dimension_names, not left behind as a v2 attribute
        assert "_ARRAY_DIMENSIONS" not in zattrs0["attributes"]


def test_more_than_five_dimensions_refused(tmp_path, roifs_bin):
    """OME-NGFF images have 2 to 5 axes: a 6-D input with ome = true is refused by check and
    mount with exit status 2 naming the key; without ome it mounts."""
    task = make_task(tmp_path, np.zeros((2, 1, 2, 1, 4, 4), "<u2"), (1, 1, 1, 1, 4, 4),
                     rois=[((0, 2), (0, 1), (0, 2), (0, 1), (0, 4), (0, 4))],
                     output={"ome": "true"})
    line = line_of(task.config, r"^ome = ")
    for cmd in ("check", "mount"):
        args = [cmd, task.config] + ([tmp_path / "mnt"] if cmd == "mount" else [])
        (tmp_path / "mnt").mkdir(exist_ok=True)
        r = run_roifs(roifs_bin, *args)
        assert r.returncode == 2, (cmd, r.stderr)
        assert f"task.ini:{line}: [output] ome = true: OME-NGFF images have 2 to 5 axes, " \
               "the input has 6 dimensions" in r.stderr, r.stderr
    write_config(task.config, {"input": {"path": "in.zarr"}, "rois": {"file": "rois.txt"},
                               "process": {"builtin": "copy"}})
    assert run_roifs(roifs_bin, "check", task.config).returncode == 0


@pytest.mark.parametrize("axes,why", [
    ([{"name": "y", "type": "space"}, {"name": "x", "type": "space"},
      {"name": "c", "type": "channel"}], "axis 'c' comes after a space axis"),
    ([{"name": "c", "type": "channel"}, {"name": "t", "type": "time"},
      {"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
     "axis 't' comes after a channel or custom axis"),
    ([{"name": "w", "type": "space"}, {"name": "z", "type": "space"},
      {"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
     "4 axes of type space"),
    ([{"name": "c", "type": "channel"}, {"name": "y", "type": "space"},
      {"name": "y", "type": "space"}], "the axis name 'y' is used twice"),
    ([{"name": "a"}, {"name": "b"}, {"name": "y", "type": "space"},
      {"name": "x", "type": "space"}], "more than one channel or custom axis"),
])
def test_invalid_input_axes_refused(tmp_path, roifs_bin, axes, why):
    """An OME input whose axes break a MUST of OME-NGFF (order, number of space axes, unique
    names, one channel or custom axis): ome = true is refused rather than passing the axes
    on; reading the same input without ome is fine."""
    path, _, _ = ome_input(tmp_path, len(axes), "0.4", axes=axes)
    config = ome_config(tmp_path, path, len(axes), 2)
    r = run_roifs(roifs_bin, "check", config)
    line = line_of(config, r"^ome = ")
    assert r.returncode == 2 and f"task.ini:{line}: [output] ome = true: the input's axes" \
        in r.stderr and why in r.stderr, r.stderr
    config.write_text(config.read_text().replace("ome = true", "ome = false"))
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 0, r.stderr


def test_string_axes_get_their_types(tmp_path, roifs_bin):
    """Axes given as bare names (OME-NGFF 0.3 style) become objects with the type their
    standard name says, so that the output's axes are valid."""
    path, _, _ = ome_input(tmp_path, 3, "0.4", axes=["c", "y", "x"])
    ome_config(tmp_path, path, 3, 2)
    with mounted(roifs_bin, tmp_path / "task.ini", tmp_path / "mnt") as m:
        ms = multiscale(m.path, 2)
        problems = check_image(m.path)
    assert ms["axes"] == [{"name": "c", "type": "channel"}, {"name": "y", "type": "space"},
                          {"name": "x", "type": "space"}]
    assert problems == [], problems


def test_dimension_names_across_formats(tmp_path, roifs_bin):
    """Without ome: a v3 input's dimension_names become _ARRAY_DIMENSIONS of a format 2
    output, which xarray then opens with those dimensions; a v2 input's _ARRAY_DIMENSIONS
    become the dimension_names of a format 3 output (and leave its attributes)."""
    import xarray as xr  # python3-xarray, from scripts/install-deps.sh
    data = np.arange(40 * 36, dtype="<u2").reshape(40, 36)
    write_v3_array(tmp_path / "v3.zarr", data, (16, 16), ["row", "col"], {"note": "kept"})
    write_config(tmp_path / "task.ini", {
        "input": {"path": "v3.zarr"}, "rois": {"grid": "20,18"},
        "process": {"builtin": "add"}, "output": {"format": 2},
        "cache": {"dir": tmp_path / "cache"}})
    with mounted(roifs_bin, tmp_path / "task.ini", tmp_path / "mnt") as m:
        attrs = json.loads((m.path / ".zattrs").read_text())
        # xarray opens groups: present the mounted array as the variable "out" of one
        group = tmp_path / "group.zarr"
        group.mkdir()
        (group / ".zgroup").write_text('{"zarr_format": 2}')
        (group / "out").symlink_to(m.path)
        with xr.open_zarr(str(group), consolidated=False) as ds:
            assert ds["out"].dims == ("row", "col")
            np.testing.assert_array_equal(ds["out"].values, data + 1)
    assert attrs["_ARRAY_DIMENSIONS"] == ["row", "col"] and attrs["note"] == "kept"

    sub = tmp_path / "v2"
    sub.mkdir()
    task = make_task(sub, data, (16, 16), rois=[((0, 40), (0, 36))],
                     attrs={"_ARRAY_DIMENSIONS": ["p", "q"], "note": "kept"},
                     output={"format": 3})
    with mounted(roifs_bin, task.config, task.mnt) as m:
        meta = json.loads((m.path / "zarr.json").read_text())
    assert meta["dimension_names"] == ["p", "q"]
    assert "_ARRAY_DIMENSIONS" not in meta["attributes"] and meta["attributes"]["note"] == "kept"


def _group(root, version, ms, level_names=None, shapes=((8, 8),)):
    """A hand-made image group for the checker's own test: one array per shape."""
    root.mkdir()
    for i, shape in enumerate(shapes):
        data = np.zeros(shape, "<u2")
        if version == "0.5":
            write_v3_array(root / str(i), data, shape, level_names)
        else:
            z = zarr.open(str(root / str(i)), mode="w", shape=shape, chunks=shape, dtype="<u2")
            if level_names is not None:
                z.attrs["_ARRAY_DIMENSIONS"] = level_names
    if version == "0.5":
        (root / "zarr.json").write_text(json.dumps({
            "zarr_format": 3, "node_type": "group",
            "attributes": {"ome": {"version": "0.5", "multiscales": [ms]}}}))
    else:
        (root / ".zgroup").write_text('{"zarr_format": 2}')
        (root / ".zattrs").write_text(json.dumps({"multiscales": [{**ms, "version": "0.4"}]}))
    return root


YX = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]


def _ms(axes=YX, n=1, scales=None, **extra):
    scales = scales or [[2.0 ** i] * len(axes) for i in range(n)]
    return {"name": "m", "type": "mean", "metadata": {}, "axes": axes, **extra,
            "datasets": [{"path": str(i), "coordinateTransformations": [
                {"type": "scale", "scale": s}]} for i, s in enumerate(scales)]}


@pytest.mark.parametrize("version,ms,names,shapes,want", [
    ("0.5", _ms(), None, ((8, 8),), "no dimension_names"),
    ("0.5", _ms(), ["row", "col"], ((8, 8),), "do not match the axes"),
    ("0.4", _ms(), ["row", "col"], ((8, 8),), "_ARRAY_DIMENSIONS ['row', 'col'] do not match"),
    ("0.4", _ms(), None, ((8, 8),), "has no _ARRAY_DIMENSIONS"),
    ("0.4", _ms(axes=[{"name": f"d{i}", "type": "space"} for i in range(6)]), None,
     ((8, 8),), "2 to 5 entries"),
    ("0.4", _ms(axes=YX + [{"name": "c", "type": "channel"}]), None, ((8, 8, 8),),
     "ordered time, channel"),
    ("0.4", _ms(axes=[{"name": "y", "type": "space"}, {"name": "y", "type": "space"}]), None,
     ((8, 8),), "unique"),
    ("0.4", _ms(axes=[{"name": "c", "type": "channel"}, {"name": "x", "type": "space"}]),
     None, ((8, 8),), "2 or 3 entries of type space"),
    ("0.4", {k: v for k, v in _ms().items() if k != "metadata"}, ["y", "x"], ((8, 8),),
     "should contain 'metadata'"),
    ("0.4", _ms(n=2), ["y", "x"], ((4, 4), (8, 8)), "highest resolution to the lowest"),
    ("0.4", _ms(scales=[[1.0, 1.0, 1.0]]), ["y", "x"], ((8, 8),), "list of 2 numbers"),
    ("0.4", _ms(axes=YX), ["y", "x"], ((8, 8, 8),), "3 dimensions, the axes 2"),
])
def test_checker_reports_violations(tmp_path, version, ms, names, shapes, want):
    """The checker itself: each hand-made violation is reported (and a conforming group of
    the same making is not), so that an empty report above means something."""
    bad = check_image(_group(tmp_path / "bad", version, ms, names, shapes))
    assert any(want in p for p in bad), bad
    good = check_image(_group(tmp_path / "good", version, _ms(), ["y", "x"]))
    assert good == [], good
