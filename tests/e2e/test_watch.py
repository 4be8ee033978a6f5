"""[input] watch = true (issue 19 item 3, docs/operations.md#following-the-input-input-watch): the
mount follows its input with inotify (Zarr v2 flat and nested keys, v3 keys and shards). An input
chunk rewritten (closed after writing, or renamed into place) invalidates, within a second and
without any open, the output chunks that depend on it: the status counts their ROIs as not done and
their files as not cached, and the kernel's cached size is dropped (the next stat asks the daemon);
their next open computes exactly the ROIs whose read region touches it. zarr-python rewrites chunks
while a reader polls the mount: every chunk read is one version, never a mix, and the last one
within a second. Directories made later (nested keys) are watched too; a metadata change makes
every chunk EIO with the reason in the status and the log; the inotify watch limit is reported with
what to do."""
import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import make_task, read_bytes, write_config
from test_v3 import BYTES_LE, encode_chain, encode_shard, shard_codec, write_v3

SHAPE, CH = (64, 64), (16, 16)
HALO = 2
# tiles of 16 x 16, and two ROIs across chunk borders
ROIS = [((y, y + 16), (x, x + 16)) for y in range(0, 64, 16) for x in range(0, 64, 16)] + \
       [((8, 40), (8, 40)), ((30, 34), (0, 64))]
BLOSC = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                            "typesize": 4, "blocksize": 0}}
LAYOUTS = ["v2", "v2-nested", "v3", "v3-shards"]


def reference(data, rois=ROIS):
    out = np.full(SHAPE, -1, "<i4")
    for (y0, y1), (x0, x1) in rois:
        out[y0:y1, x0:x1] = data[y0:y1, x0:x1] + 1
    return out


def watch_task(tmp_path, layout, missing=()):
    data = np.random.default_rng(11).integers(0, 1 << 20, SHAPE, dtype="<i4")
    regions = None
    if missing:
        regions = [tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, CH))
                   for idx in itertools.product(range(4), range(4)) if idx not in missing]
    task = make_task(tmp_path, data, CH, rois=ROIS,
                     process={"builtin": "add", "param.value": 1, "threads": 2, "readahead": 0},
                     output={"compressor": "blosc", "fill_value": -1},
                     dimension_separator="/" if layout == "v2-nested" else ".",
                     regions=regions,
                     sections={"input": {"watch": "true"}, "rois": {"halo": f"{HALO},{HALO}"},
                               "mount": {"passthrough": "false"}})
    data = task.inp.copy()
    if layout.startswith("v3"):
        v3 = tmp_path / "in3.zarr"
        data = write_v3(v3, data, (32, 32) if layout == "v3-shards" else CH, codecs(layout),
                        missing=tuple(missing))
        text = task.config.read_text().replace("path = in.zarr", "path = in3.zarr")
        task.config.write_text(text)
        task.input = v3
    return task, data


def codecs(layout):
    if layout == "v3-shards":
        return shard_codec(CH, [BYTES_LE, BLOSC])
    return [BYTES_LE, BLOSC]


def rewrite(task, layout, data, block, values, rename=True):
    """Writes values into the input block (a whole input chunk; with shards, its shard)."""
    (y0, y1), (x0, x1) = block
    data[y0:y1, x0:x1] = values
    if not layout.startswith("v3"):
        zarr.open(str(task.input), mode="r+")[y0:y1, x0:x1] = values
        return
    shape = (32, 32) if layout == "v3-shards" else CH
    sy, sx = y0 // shape[0], x0 // shape[1]
    unit = data[sy * shape[0]:(sy + 1) * shape[0], sx * shape[1]:(sx + 1) * shape[1]]
    enc = (encode_shard(unit, codecs(layout)[0]["configuration"], 0)
           if layout == "v3-shards" else encode_chain(unit, codecs(layout)))
    key = task.input / "c" / str(sy) / str(sx)
    key.parent.mkdir(parents=True, exist_ok=True)
    if rename:  # a rename into place (IN_MOVED_TO)
        tmp = key.with_name(f".{sx}.tmp")
        tmp.write_bytes(enc)
        os.replace(tmp, key)
    else:  # written in place (IN_CLOSE_WRITE)
        key.write_bytes(enc)


def touching(block, rois=ROIS):
    out = []
    for i, ((y0, y1), (x0, x1)) in enumerate(rois):
        ry0, ry1 = max(0, y0 - HALO), min(SHAPE[0], y1 + HALO)
        rx0, rx1 = max(0, x0 - HALO), min(SHAPE[1], x1 + HALO)
        if ry0 < block[0][1] and block[0][0] < ry1 and rx0 < block[1][1] and block[1][0] < rx1:
            out.append(i)
    return out


def chunks_of(roi_ids, rois=ROIS):
    out = set()
    for i in roi_ids:
        (y0, y1), (x0, x1) = rois[i]
        out.update(itertools.product(range(y0 // 16, (y1 - 1) // 16 + 1),
                                     range(x0 // 16, (x1 - 1) // 16 + 1)))
    return out


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.monotonic()
        time.sleep(0.01)
    raise AssertionError(f"not within {timeout} s: {what}")


def sizes(mnt, chunks):
    return {c: os.stat(mnt / f"{c[0]}.{c[1]}").st_size for c in chunks}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rewritten_chunk_invalidates_its_dependents(tmp_path, mount, layout):
    task, data = watch_task(tmp_path, layout)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data))
        st = m.status()
        assert st["rois"]["done"] == len(ROIS) and st["chunks"]["cached"] == 16
        assert st["watch"]["dirs"] >= 1 and st["watch"]["unwatched"] == 0, st["watch"]
        block = ((16, 32), (32, 48)) if layout != "v3-shards" else ((0, 32), (32, 64))
        rois = touching(block)
        affected = chunks_of(rois)
        assert 0 < len(rois) < len(ROIS) and len(affected) < 16
        before = sizes(m.path, affected)
        calls = st["calls"]
        # constant values: their output chunks compress to much less than before
        t0 = time.monotonic()
        rewrite(task, layout, data, block, 7, rename=layout != "v3")
        wait_for(lambda: m.status()["rois"]["done"] == len(ROIS) - len(rois), 1.0,
                 "the ROIs reading the rewritten chunk counted as not done")
        st = m.status()
        assert st["chunks"]["cached"] == 16 - len(affected), st["chunks"]
        # the kernel asks again for the size (not the old exact one): nothing was opened
        wait_for(lambda: all(s != before[c] for c, s in sizes(m.path, affected).items()),
                 max(0.1, 1.0 - (time.monotonic() - t0)), "the kernel's cached sizes dropped")
        assert m.status()["calls"] == calls
        # the next read computes exactly those ROIs
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data))
        st = m.status()
        assert st["calls"] == calls + len(rois), (st["calls"], calls, rois)
        assert st["rois"]["done"] == len(ROIS) and st["chunks"]["cached"] == 16
        now = sizes(m.path, affected)
        mine = (block[0][0] // 16, block[1][0] // 16)  # the output chunk over the block itself
        assert now[mine] < before[mine], (before, now)
        assert all(now[c] <= before[c] for c in affected), (before, now)


def test_zarr_python_rewrites_while_a_reader_polls(tmp_path, mount):
    task, data = watch_task(tmp_path, "v2")
    versions = [data.copy()]
    block = (slice(16, 32), slice(16, 32))
    with mount(task.config) as m:
        stop, errors, reads, last = threading.Event(), [], [0], {}

        def reader():
            z = zarr.open(str(m.path), mode="r")
            while not stop.is_set():
                try:
                    got = z[:]
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(repr(e))
                    return
                # every chunk is one version of the input, never a mix of two
                for idx in itertools.product(range(4), range(4)):
                    sl = (slice(idx[0] * 16, idx[0] * 16 + 16), slice(idx[1] * 16, idx[1] * 16 + 16))
                    if not any(np.array_equal(got[sl], reference(v)[sl]) for v in versions):
                        errors.append(f"chunk {idx}: no version of the input")
                last["got"], last["t"] = got, time.monotonic()
                reads[0] += 1

        th = threading.Thread(target=reader)
        th.start()
        try:
            z = zarr.open(str(task.input), mode="r+")
            for k in range(5):
                time.sleep(0.3)
                new = versions[-1].copy()
                new[block] = 1000 * (k + 1) + np.arange(256).reshape(16, 16)
                versions.append(new)
                z[block] = new[block]
                done = time.monotonic()
                # within a second of the write, the reader sees it
                wait_for(lambda: last.get("t", 0) > done and
                         np.array_equal(last["got"], reference(new)), 1.0,
                         f"rewrite {k} seen by the reader")
        finally:
            stop.set()
            th.join(timeout=30)
        assert not errors, errors[:3]
        assert reads[0] > 5
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(versions[-1]))
        assert m.status()["watch"]["changes"] >= 5


@pytest.mark.parametrize("layout", ["v2-nested", "v3"])
def test_directories_made_later_are_watched(tmp_path, mount, layout):
    """Input row 2 does not exist at the mount (nested keys: not even its directory); written
    later, its directory is watched from its creation, and what was written in it counts."""
    missing = [(2, j) for j in range(4)]
    task, data = watch_task(tmp_path, layout, missing=missing)
    row = task.input / ("c/2" if layout == "v3" else "2")
    assert not row.exists()
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data))
        block = ((32, 48), (16, 32))
        rois = touching(block)
        rewrite(task, layout, data, block, 5)
        wait_for(lambda: m.status()["rois"]["done"] == len(ROIS) - len(rois), 1.0,
                 "a chunk in a new directory noticed")
        assert row.is_dir()
        # a second chunk in that directory, now that it is watched
        block2 = ((32, 48), (48, 64))
        rois2 = set(touching(block2)) - set(rois)
        rewrite(task, layout, data, block2, 9)
        wait_for(lambda: m.status()["rois"]["done"] == len(ROIS) - len(rois) - len(rois2), 1.0,
                 "a second chunk in the new directory noticed")
        calls = m.status()["calls"]
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data))
        assert m.status()["calls"] == calls + len(set(rois) | rois2)


def test_metadata_change_stops_the_mount(tmp_path, mount):
    task, data = watch_task(tmp_path, "v2")
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data))
        z = zarr.open(str(task.input), mode="r+")
        z.attrs["note"] = "attributes only"  # .zattrs: nothing to refuse
        (task.input / ".zarray").write_text((task.input / ".zarray").read_text())  # the same
        time.sleep(0.5)
        assert "input_error" not in m.status()
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data))
        z.resize(64, 80)
        wait_for(lambda: "input_error" in m.status(), 1.5, "the metadata change noticed")
        err = m.status()["input_error"]
        assert "shape changed from [64, 64] to [64, 80]" in err, err
        with pytest.raises(OSError) as e:
            read_bytes(m.path / "0.0")
        assert e.value.errno == 5  # EIO
        assert "shape changed from [64, 64] to [64, 80]" in m.log_text()


def test_watch_limit_is_reported(tmp_path, roifs_bin):
    """In a user namespace whose inotify watch limit is 2, the mount watches what it can,
    serves the input, and says which limit to raise (status and log)."""
    task, data = watch_task(tmp_path, "v2-nested")
    script = tmp_path / "inside.py"
    script.write_text(textwrap.dedent(f"""\
        import json, os, subprocess, sys, time
        open("/proc/sys/user/max_inotify_watches", "w").write("2")
        mnt = {str(task.mnt)!r}
        os.makedirs(mnt, exist_ok=True)
        log = open({str(tmp_path / "inside.log")!r}, "wb")
        p = subprocess.Popen([{roifs_bin!r}, "mount", "-f",
                              {str(task.config)!r}, mnt], stdout=log, stderr=log)
        try:
            for _ in range(300):
                if os.path.ismount(mnt):
                    break
                time.sleep(0.05)
            st = json.load(open(mnt + "/.roifs/status"))
            print(json.dumps(st["watch"]))
            sys.stdout.flush()
        finally:
            subprocess.run(["fusermount3", "-u", mnt])
            p.wait(timeout=20)
        """))
    r = subprocess.run(["unshare", "-Urm", sys.executable, str(script)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    w = json.loads(r.stdout.strip().splitlines()[-1])
    assert w["dirs"] == 2 and w["unwatched"] == 3, w  # the array and 4 row directories
    assert "user.max_inotify_watches = 2" in w["warning"], w
    assert "raise the limit" in w["warning"]
    assert "cannot watch" in (tmp_path / "inside.log").read_text()


def test_pyramid_levels_follow(tmp_path, mount):
    """With ome = true, the chunks of the lower levels that reduce an invalidated chunk are
    invalidated too, and read again from the new input."""
    task, data = watch_task(tmp_path, "v2")
    text = task.config.read_text().replace("[output]\n", "[output]\nome = true\nlevels = 3\n")
    task.config.write_text(text)
    with mount(task.config) as m:
        for level in range(3):
            zarr.open(str(m.path / str(level)), mode="r")[:]
        st = m.status()["levels"]
        assert [lv["chunks"]["cached"] for lv in st] == [16, 4, 1], st
        block = ((48, 64), (48, 64))
        rewrite(task, "v2", data, block, 3)
        # level 1 chunk (1, 1) reduces level-0 chunks rows 2-3, columns 2-3; level 2 all
        wait_for(lambda: [lv["chunks"]["cached"] for lv in m.status()["levels"]][1:] == [3, 0],
                 1.0, "the lower levels' chunks invalidated")
        ref = reference(data)
        np.testing.assert_array_equal(zarr.open(str(m.path / "0"), mode="r")[:], ref)
        lvl1 = zarr.open(str(m.path / "1"), mode="r")[:]
        want = np.rint(ref.reshape(32, 2, 32, 2).mean(axis=(1, 3))).astype("<i4")
        np.testing.assert_array_equal(lvl1[24:32, 24:32], want[24:32, 24:32])
        assert [lv["chunks"]["cached"] for lv in m.status()["levels"]][:2] == [16, 4]
