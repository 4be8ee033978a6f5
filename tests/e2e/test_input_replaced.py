"""The input is its path (issue 31 item 1): the input array's directory made again while
mounted (zarr-python 2's open(mode="w") removes it and makes it anew) or swapped (`mv new old`)
is read through the directory now at the path when it holds an array of the same layout, never
the old one (whose results are not served) nor the removed one (whose chunks all looked
missing: f(fill value)); another layout there, or no directory, fails the chunks that need the
input with EIO and the reason in the status and the log, and the array put back is followed
again. With [input] watch the replacement is noticed within a second without any open (the
parent directory is watched for the array's name), and the new directory is watched in the old
one's place. A remount afterwards serves the same, from the cache."""
import contextlib
import errno
import os
import shutil
import time

import numpy as np
import pytest
import zarr

from conftest import make_task, read_bytes

SHAPE, CH = (64, 64), (16, 16)
ROIS = [((y, y + 16), (x, x + 16)) for y in range(0, 64, 16) for x in range(0, 64, 16)] + \
       [((8, 40), (8, 40))]


def reference(data):
    out = np.full(SHAPE, -1, "<i4")
    for (y0, y1), (x0, x1) in ROIS:
        out[y0:y1, x0:x1] = data[y0:y1, x0:x1] + 1
    return out


def task_for(tmp_path, watch):
    data = np.random.default_rng(3).integers(0, 1 << 20, SHAPE, dtype="<i4")
    sections = {"rois": {"halo": "2,2"}, "mount": {"passthrough": "false"}}
    if watch:
        sections["input"] = {"watch": "true"}
    task = make_task(tmp_path, data, CH, rois=ROIS,
                     process={"builtin": "add", "param.value": 1, "threads": 2,
                              "readahead": 0},
                     output={"compressor": "blosc", "fill_value": -1}, sections=sections)
    return task, task.inp.copy()


def write_array(path, data, shape=SHAPE):
    """zarr-python 2's open(mode="w"): removes the directory at path and makes it again, with
    the metadata make_task gave the input (of another shape when shape says so)."""
    z = zarr.open(str(path), mode="w", shape=shape, chunks=CH, dtype="<i4", compressor=None,
                  fill_value=0, dimension_separator=".")
    z[...] = data
    return data


def new_data(seed):
    return np.random.default_rng(seed).integers(0, 1 << 20, SHAPE, dtype="<i4")


def read_all(m):
    return zarr.open(str(m.path), mode="r")[:]


def assert_serves(m, data):
    """The mount reads as the job's result on input data (numpy reference)."""
    np.testing.assert_array_equal(read_all(m), reference(data))


@contextlib.contextmanager
def served_first(tmp_path, mount, watch):
    """The job of task_for mounted and read once, as the result on its first input: yields
    (task, that input, the mount)."""
    task, data = task_for(tmp_path, watch)
    with mount(task.config) as m:
        assert_serves(m, data)
        yield task, data, m


def remount_serves(mount, task, data):
    """A remount reads as the result on data, all of it from the cache: no processor call."""
    with mount(task.config) as m:
        assert_serves(m, data)
        assert m.status()["calls"] == 0


def swap_in(tmp_path, task, data, shape=SHAPE):
    """Writes data to new.zarr beside the input, then mv in.zarr old.zarr; mv new.zarr in.zarr."""
    write_array(tmp_path / "new.zarr", data, shape=shape)
    os.rename(task.input, tmp_path / "old.zarr")
    os.rename(tmp_path / "new.zarr", task.input)
    return data


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"not within {timeout} s: {what}")


def watched_replacement_noticed(m, watch):
    """With watch, every ROI counts as not done within a second of the replacement, without
    an open (the parent's events; the reader's descriptor keeps the old directory alive)."""
    if watch:
        wait_for(lambda: m.status()["rois"]["done"] == 0, 1.0, "the replacement noticed")


def removed_dirs_open(m, name):
    """The removed directories called name the daemon still has open."""
    out = []
    for fd in os.listdir(f"/proc/{m.proc.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{m.proc.pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)") and name in target:
            out.append(target)
    return out


def whole_log(m):
    return m.log.read_text(errors="replace")  # log_text() is its tail only


def eio_with(m, key, reason):
    with pytest.raises(OSError) as e:
        read_bytes(m.path / key)
    assert e.value.errno == errno.EIO
    s = m.status()
    texts = [x["message"] for x in s["errors"]] + [s.get("input_error", "")]
    assert any(reason in t for t in texts), s
    assert reason in whole_log(m)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("watch", [False, True])
def test_zarr_open_w_makes_the_directory_again(tmp_path, mount, watch):
    with served_first(tmp_path, mount, watch) as (task, data, m):
        new = write_array(task.input, new_data(5))
        watched_replacement_noticed(m, watch)
        assert_serves(m, new)
        assert "reading it from now on" in whole_log(m)
        # and again, while the first replacement's directory is the one held
        newer = write_array(task.input, new_data(6))
        watched_replacement_noticed(m, watch)
        assert_serves(m, newer)
        read_bytes(m.path / "0.0")  # a look while no other thread reads: the old ones closed
        assert not removed_dirs_open(m, task.input.name)
    remount_serves(mount, task, newer)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("watch", [False, True])
def test_swapped_directory_of_the_same_array_is_followed(tmp_path, mount, watch):
    with served_first(tmp_path, mount, watch) as (task, data, m):
        new = swap_in(tmp_path, task, new_data(7))
        watched_replacement_noticed(m, watch)
        assert_serves(m, new)  # never the old results
        if watch:  # the new directory is watched in the old one's place
            assert m.status()["rois"]["done"] == len(ROIS)
            z = zarr.open(str(task.input), mode="r+")
            new[0:16, 0:16] = 77
            z[0:16, 0:16] = new[0:16, 0:16]
            wait_for(lambda: m.status()["rois"]["done"] < len(ROIS), 1.0,
                     "a chunk of the new directory rewritten, noticed")
            assert_serves(m, new)
        # the old directory moved back: followed again
        os.rename(task.input, tmp_path / "new.zarr")
        os.rename(tmp_path / "old.zarr", task.input)
        watched_replacement_noticed(m, watch)
        assert_serves(m, data)
    remount_serves(mount, task, data)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("watch", [False, True])
def test_swapped_directory_of_another_array_fails(tmp_path, mount, watch):
    with served_first(tmp_path, mount, watch) as (task, data, m):
        swap_in(tmp_path, task, np.zeros((64, 80), "<i4"), shape=(64, 80))
        if watch:
            wait_for(lambda: "input_error" in m.status(), 1.5, "the other array noticed")
        for key in ("0.0", "3.3"):  # a cached chunk too: nothing of the old array is served
            eio_with(m, key, "shape changed from [64, 64] to [64, 80]")
        assert m.alive()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("watch", [False, True])
def test_removed_directory_fails_until_the_array_is_back(tmp_path, mount, watch):
    with served_first(tmp_path, mount, watch) as (task, data, m):
        shutil.rmtree(task.input)
        watched_replacement_noticed(m, watch)
        for key in ("0.0", "1.2"):
            eio_with(m, key, "was removed")
        assert m.alive()
        new = write_array(task.input, new_data(9))  # the array back, other data
        watched_replacement_noticed(m, watch)
        assert_serves(m, new)
        assert "there again" in whole_log(m)


@pytest.mark.timeout(120)
def test_mask_directory_made_again_is_followed(tmp_path, mount):
    """The mask ([rois] mask) is an input too: zarr-python's open(mode="w") writing another
    label image while mounted, the next read applies the new one."""
    from test_masks import ROIS as MASKED, label_image, masked_task
    from test_masks import reference as masked_reference
    from test_masks import write_mask
    mask = label_image((64, 80))
    t = masked_task(tmp_path, mask, mask_input="zero")
    with mount(t.config) as m:
        np.testing.assert_array_equal(read_all(m), masked_reference(t.inp, mask, MASKED))
        edited = label_image((64, 80), seed=8)
        want = masked_reference(t.inp, edited, MASKED)
        assert not np.array_equal(want, masked_reference(t.inp, mask, MASKED))
        write_mask(tmp_path / "mask.zarr", edited)
        np.testing.assert_array_equal(read_all(m), want)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("watch", [False, True])
def test_ome_image_group_removed_then_made_again(tmp_path, mount, watch):
    """[input] path an OME-Zarr image group (level 0): the whole group removed (EIO), then made
    again by zarr-python with other pixels, its level array read. With watch, the array's
    parent (the group) went too: the watch looks for it until it is there again, then watches
    the new level array."""
    from test_masks import write_image
    task, data = task_for(tmp_path, watch)
    img = tmp_path / "img.zarr"
    write_image(img, data)
    task.config.write_text(task.config.read_text().replace("path = in.zarr",
                                                           "path = img.zarr\nlevel = 0"))
    with mount(task.config) as m:
        assert_serves(m, data)
        shutil.rmtree(img)
        watched_replacement_noticed(m, watch)
        eio_with(m, "1.1", "was removed")
        if watch:
            assert m.status()["watch"]["dirs"] == 0
        new = new_data(11)
        write_image(img, new)
        if watch:
            wait_for(lambda: m.status()["watch"]["dirs"] > 0, 1.0, "the new group watched")
        assert_serves(m, new)
        if watch:  # the new level array is watched
            assert m.status()["rois"]["done"] == len(ROIS)
            new[0:16, 0:16] = 77
            zarr.open(str(img / "0"), mode="r+")[0:16, 0:16] = 77
            wait_for(lambda: m.status()["rois"]["done"] < len(ROIS), 1.0,
                     "a chunk of the new level array rewritten, noticed")
            assert_serves(m, new)


@pytest.mark.timeout(120)
def test_directory_emptied_then_removed_under_watch_is_no_metadata_change(tmp_path, mount):
    """`rm -r` seen in two batches of events: the metadata file removed (the watch looks for it
    again for a second), then its directory. That is the directory's removal, which ends when
    an array of the same layout is there again, not a metadata change that stops the mount."""
    task, data = task_for(tmp_path, True)
    with mount(task.config) as m:
        assert_serves(m, data)
        for f in task.input.iterdir():
            f.unlink()
        time.sleep(0.3)
        task.input.rmdir()
        time.sleep(1.2)
        assert "input_error" not in m.status()
        new = write_array(task.input, new_data(12))
        wait_for(lambda: m.status()["watch"]["dirs"] > 0, 1.0, "the new directory watched")
        assert_serves(m, new)
