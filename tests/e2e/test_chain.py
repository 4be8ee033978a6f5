"""Chained mounts (docs/fractal.md#two-mounts-chained; issue 17 item 4): a second mount whose input
is the first one's presented image. Each mount computes its ROIs once, also across remounts of
either; nothing deadlocks with readers on both and every compute thread busy; and unmounting either
one first, with a read in flight, leaves no hung process: readers get EIO, the mount left keeps
serving what it has and reports the input's failure, and unmounts cleanly. Last, the Fractal
example of config/ (organoids, then nuclei within them) end to end."""
import contextlib
import errno
import json
import os
import shutil
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import zarr
from scipy import ndimage
from numcodecs import Zlib

from conftest import (REPO, is_mounted, mounted, read_bytes, roi_text, run_roifs, wait_for,
                      write_config)

SHAPE, CHUNKS = (160, 224), (64, 64)
# Boxes that straddle the chunks of both mounts (64 and 48), and overlap one another.
ROIS1 = [((0, 70), (0, 100)), ((50, 130), (60, 200)), ((100, 160), (0, 90)),
         ((10, 60), (150, 224)), ((120, 160), (120, 224))]
ROIS2 = [((5, 100), (10, 70)), ((40, 150), (50, 130)), ((0, 50), (100, 210)),
         ((90, 160), (140, 224)), ((130, 160), (0, 40)), ((60, 80), (0, 224))]


def apply_rois(src, rois, value):
    """src + value inside rois (later ROIs win), 0 elsewhere: builtin add, outside = fill."""
    out = np.zeros(src.shape, "<u2")
    for (y0, y1), (x0, x1) in rois:
        out[y0:y1, x0:x1] = src[y0:y1, x0:x1] + value
    return out


def chain_files(tmp_path, *, delay1=0, delay2=0, threads=2, compressor1="zlib", readahead=-1):
    """in.zarr, step1.ini (ome = true over in.zarr) and step2.ini (over MNT1 = tmp_path/m1,
    level 0) with their ROI lists and caches; returns (step1.ini, step2.ini, in, reference of
    step 2)."""
    rng = np.random.default_rng(17)
    data = rng.integers(0, 1000, SHAPE).astype("<u2")
    z = zarr.open(str(tmp_path / "in.zarr"), mode="w", shape=SHAPE, chunks=CHUNKS,
                  dtype="<u2", compressor=Zlib(1))
    z[...] = data
    (tmp_path / "rois1.txt").write_text("".join(roi_text(r) + "\n" for r in ROIS1))
    (tmp_path / "rois2.txt").write_text("".join(roi_text(r) + "\n" for r in ROIS2))
    c1 = write_config(tmp_path / "step1.ini", {
        "input": {"path": "in.zarr"}, "rois": {"file": "rois1.txt"},
        "process": {"builtin": "add", "param.value": 1, "param.delay": delay1,
                    "threads": threads, "readahead": readahead},
        "output": {"ome": "true", "levels": 2, "compressor": compressor1},
        "cache": {"dir": tmp_path / "cache1"}})
    c2 = write_config(tmp_path / "step2.ini", {
        "input": {"path": tmp_path / "m1", "level": 0}, "rois": {"file": "rois2.txt"},
        "process": {"builtin": "add", "param.value": 10, "param.delay": delay2,
                    "threads": threads, "readahead": readahead},
        "output": {"chunks": "48,48", "compressor": "zlib"},
        "cache": {"dir": tmp_path / "cache2"}})
    return c1, c2, data, apply_rois(apply_rois(data, ROIS1, 1), ROIS2, 10)


def daemon(roifs_bin, config, mnt):
    """Mounts config at mnt with -f in the background (conftest.mounted); the body may unmount
    it (roifs unmount) and checks the daemon's exit itself."""
    return mounted(roifs_bin, config, mnt, checked=False)


def unmount(roifs_bin, d, within):
    """roifs unmount of d: exit 0 within `within` seconds, and its daemon gone with status 0."""
    t0 = time.monotonic()
    r = run_roifs(roifs_bin, "unmount", d.path, timeout=30)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert d.proc.wait(timeout=10) == 0, d.log_text()
    assert took < within, f"roifs unmount took {took:.1f} s\n{d.log_text()}"
    assert not is_mounted(d.path)
    return took


def read_in_thread(path):
    """Starts reading path in a thread; returns (thread, result dict: data or error, and the
    monotonic time the read ended)."""
    got = {}

    def run():
        try:
            got["data"] = read_bytes(path)
        except OSError as e:
            got["error"] = e
        got["ended"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, got


def no_stuck_threads(pid):
    """The threads of pid (if it still exists) that sleep uninterruptibly (state D)."""
    out = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                st = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                if st.rpartition(")")[2].split()[0] == "D":
                    out.append(tid)
    return not out


@pytest.mark.timeout(150)
@pytest.mark.parametrize("compressor1", ["zlib", "none"])
def test_chain_computes_each_roi_once_also_across_remounts(tmp_path, roifs_bin, compressor1):
    """Several zarr-python readers of mount 2 at once: the values of both steps, each mount's
    calls equal to its ROI count. Both mounted again on the same caches: nothing is computed
    (mount 1's chunk files keep their identity across its remounts: size and mtime are the
    cached file's, whatever the chunk's encoding)."""
    c1, c2, _, want = chain_files(tmp_path, compressor1=compressor1)
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    for rnd in range(2):
        with daemon(roifs_bin, c1, m1) as d1, daemon(roifs_bin, c2, m2) as d2:
            got = [None] * 4

            def reader(i):
                got[i] = zarr.open(str(m2), mode="r")[...]

            th = [threading.Thread(target=reader, args=(i,)) for i in range(len(got))]
            for t in th:
                t.start()
            for t in th:
                t.join(60)
            assert not any(t.is_alive() for t in th), "a reader of mount 2 hangs"
            for g in got:
                np.testing.assert_array_equal(g, want)
            s1, s2 = d1.status(), d2.status()
            assert s1["rois"]["failed"] == s2["rois"]["failed"] == 0, (s1["errors"], s2["errors"])
            if rnd == 0:
                assert (s1["calls"], s2["calls"]) == (len(ROIS1), len(ROIS2))
            else:
                assert (s1["calls"], s2["calls"]) == (0, 0), "computed again after a remount"
                assert s2["rois"]["done"] == len(ROIS2)
            unmount(roifs_bin, d2, 10)
            unmount(roifs_bin, d1, 10)


@pytest.mark.timeout(150)
def test_chain_busy_on_both_sides_does_not_deadlock(tmp_path, roifs_bin):
    """One compute thread per mount, slow ROIs on both, eight readers of mount 2's chunks and
    two of mount 1's at once: every read ends with the right bytes, each ROI once."""
    c1, c2, data, want = chain_files(tmp_path, delay1=0.3, delay2=0.3, threads=1)
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    with daemon(roifs_bin, c1, m1) as d1, daemon(roifs_bin, c2, m2) as d2:
        keys2 = sorted(p.name for p in m2.iterdir() if p.name[0].isdigit())
        keys1 = sorted(p.name for p in (m1 / "0").iterdir() if p.name[0].isdigit())
        jobs = [read_in_thread(m2 / k) for k in keys2[::-1][:8]]
        jobs += [read_in_thread(m1 / "0" / k) for k in keys1[:2]]
        for t, _ in jobs:
            t.join(90)
        assert not any(t.is_alive() for t, _ in jobs), "deadlock: reads still waiting"
        assert all("data" in g for _, g in jobs), [g.get("error") for _, g in jobs]
        np.testing.assert_array_equal(zarr.open(str(m2), mode="r")[...], want)
        np.testing.assert_array_equal(zarr.open(str(m1 / "0"), mode="r")[...],
                                      apply_rois(data, ROIS1, 1))
        assert (d1.status()["calls"], d2.status()["calls"]) == (len(ROIS1), len(ROIS2))
        unmount(roifs_bin, d2, 10)
        unmount(roifs_bin, d1, 10)


@pytest.mark.timeout(120)
def test_unmount_upstream_first_with_a_read_in_flight(tmp_path, roifs_bin):
    """Mount 1 goes while mount 2 waits on it: mount 2's reader gets EIO at once, mount 2
    serves what it has and reports mount 1's failure in its status; mounted again, mount 1 is
    taken up again by mount 2 (its input directory opened anew), which computes what failed;
    mount 2 unmounts cleanly."""
    c1, c2, _, want = chain_files(tmp_path, delay1=20, readahead=0)
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    # Chunk 0.0 of mount 2 first, mount 1 without delay: mount 1's ROIs 0, 1, 2 and 4 done.
    c1.write_text(c1.read_text().replace("param.delay = 20", "param.delay = 0"))
    with daemon(roifs_bin, c1, m1) as d1, daemon(roifs_bin, c2, m2) as d2:
        first = read_bytes(m2 / "0.0")
        unmount(roifs_bin, d2, 10)
        unmount(roifs_bin, d1, 10)
    c1.write_text(c1.read_text().replace("param.delay = 0", "param.delay = 20"))
    with daemon(roifs_bin, c1, m1) as d1, daemon(roifs_bin, c2, m2) as d2:
        t, got = read_in_thread(m2 / "0.3")  # needs mount 1's ROI 3, not computed yet
        wait_for(lambda: d1.status()["rois"]["running"] > 0, 20, "mount 1 computing")
        gone = time.monotonic()
        unmount(roifs_bin, d1, 10)
        t.join(10)
        assert not t.is_alive(), "mount 2's reader hangs after mount 1 went"
        assert isinstance(got.get("error"), OSError) and got["error"].errno == errno.EIO, got
        assert got["ended"] - gone < 5
        assert d2.proc.poll() is None, "mount 2 died with mount 1"
        assert read_bytes(m2 / "0.0") == first  # what it has, it serves
        with pytest.raises(OSError) as e:  # what it has not: EIO, at once
            read_bytes(m2 / "2.0")
        assert e.value.errno == errno.EIO
        s = d2.status()
        assert s["rois"]["failed"] > 0
        assert any(str(m1) in x["message"] for x in s["errors"]), s["errors"]
        assert no_stuck_threads(d2.proc.pid)
        # Mount 1 again: mount 2 opens its input again and computes what failed.
        c1.write_text(c1.read_text().replace("param.delay = 20", "param.delay = 0"))
        with daemon(roifs_bin, c1, m1) as d1:
            for key, box in (("0.3", want[0:48, 144:192]), ("2.0", want[96:144, 0:48])):
                np.testing.assert_array_equal(
                    np.frombuffer(zlib.decompress(read_bytes(m2 / key)), "<u2"), box.ravel())
            assert "opened again" in d2.log_text()
            unmount(roifs_bin, d2, 5)
            unmount(roifs_bin, d1, 10)
    np.testing.assert_array_equal(np.frombuffer(zlib.decompress(first), "<u2"),
                                  want[:48, :48].ravel())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("waiting", ["one", "several"])
def test_unmount_downstream_first_with_a_read_in_flight(tmp_path, roifs_bin, waiting):
    """Mount 2 goes while its compute threads wait on a slow open of mount 1 (one thread, or
    four whose ROIs all read one chunk of mount 1: one opens it, the others wait for that
    load): its unmount takes no grace period (the open is interrupted: mount 1 answers the
    interrupted open at once and goes on computing), its reader gets an error, and mount 1
    still serves."""
    c1, c2, data, _ = chain_files(tmp_path, delay1=6)
    if waiting == "several":  # 8 ROIs in mount 2's chunk 0.0, all inside mount 1's chunk 0.0
        (tmp_path / "rois2.txt").write_text("".join(
            f"{y}:{y + 12}, {x}:{x + 24}\n" for y in range(0, 48, 12) for x in (0, 24)))
        c2.write_text(c2.read_text().replace("threads = 2", "threads = 4"))
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    with daemon(roifs_bin, c1, m1) as d1, daemon(roifs_bin, c2, m2) as d2:
        t, got = read_in_thread(m2 / "0.0")
        wait_for(lambda: d1.status()["rois"]["running"] > 0, 20, "mount 1 computing")
        unmount(roifs_bin, d2, 3)
        t.join(10)
        assert not t.is_alive() and "error" in got, got
        assert "exiting without them" not in d2.log_text()
        assert not os.path.exists(f"/proc/{d2.proc.pid}")
        # mount 1 carries on: its ROIs finish, once, and its chunks read right
        np.testing.assert_array_equal(zarr.open(str(m1 / "0"), mode="r")[0:64, 0:64],
                                      apply_rois(data, ROIS1, 1)[0:64, 0:64])
        assert d1.status()["rois"]["failed"] == 0
        unmount(roifs_bin, d1, 10)


@pytest.mark.timeout(120)
def test_labels_over_a_mount_have_their_own_status(tmp_path, roifs_bin):
    """ome = labels over another mount's image: the second mount presents that image with its
    own labels, and its own status file, not the first mount's (the input's .roifs is no
    file of the image)."""
    c1, c2, data, _ = chain_files(tmp_path)
    text = c2.read_text().replace("builtin = add", "builtin = threshold")
    text = text.replace("param.value = 10", "param.value = 500")
    c2.write_text(text.replace('chunks = 48,48', 'ome = labels\ndtype = |u1\nlabel_name = bright'))
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    with daemon(roifs_bin, c1, m1) as d1, daemon(roifs_bin, c2, m2) as d2:
        want = np.zeros(SHAPE, "u1")
        level0 = apply_rois(data, ROIS1, 1)
        for (y0, y1), (x0, x1) in ROIS2:
            want[y0:y1, x0:x1] = level0[y0:y1, x0:x1] > 500
        np.testing.assert_array_equal(
            zarr.open(str(m2 / "labels" / "bright" / "0"), mode="r")[...], want)
        np.testing.assert_array_equal(zarr.open(str(m2 / "0"), mode="r")[...], level0)
        assert sorted(os.listdir(m2 / ".roifs")) == ["status"]
        s1, s2 = d1.status(), d2.status()
        assert (s1["rois"]["total"], s2["rois"]["total"]) == (len(ROIS1), len(ROIS2))
        assert (s1["calls"], s2["calls"]) == (len(ROIS1), len(ROIS2))
        # The first mount's files cannot pass through a second FUSE mount (the kernel's stack
        # depth): they are read through, and the second mount's own chunks still pass through.
        assert s2["fuse"]["passthrough"] == s1["fuse"]["passthrough"], s2["fuse"]
        np.testing.assert_array_equal(  # read again, now by the second mount's own descriptors
            zarr.open(str(m2 / "labels" / "bright" / "0"), mode="r")[...], want)
        unmount(roifs_bin, d2, 10)
        unmount(roifs_bin, d1, 10)


@pytest.mark.timeout(120)
def test_sequential_ids_over_a_mount_whose_chunks_are_not_made_yet(tmp_path, roifs_bin):
    """ids = sequential over another mount, without read-ahead: the first chunk read of mount
    2 holds only its second ROI, whose ids need the count of the first, whose input (mount 1's
    chunks 0.0 and 0.1) is not computed yet. Its key is taken from those chunks' size and
    mtime before they are made, and reading them to compute the ROI changes both: the ROI is
    still computed once (it was computed again without end, and the read hung), and the ids
    follow the first ROI's count."""
    c1, c2, data, _ = chain_files(tmp_path, readahead=0)
    halves = [((0, 160), (0, 100)), ((0, 160), (128, 224))]
    (tmp_path / "rois1.txt").write_text("".join(roi_text(r) + "\n" for r in halves))
    (tmp_path / "rois2.txt").write_text("".join(roi_text(r) + "\n" for r in halves))
    text = c2.read_text().replace("builtin = add", "builtin = label")
    text = text.replace("param.value = 10", "param.value = 500")
    c2.write_text(text.replace("chunks = 48,48", "chunks = 160,112\ndtype = <u4") +
                  "\n[labels]\nids = sequential\n")
    step1 = apply_rois(data, halves, 1)
    want, before = np.zeros(SHAPE, "<u4"), 0
    for (y0, y1), (x0, x1) in halves:
        lab, n = ndimage.label(step1[y0:y1, x0:x1] > 500)
        want[y0:y1, x0:x1] = np.where(lab > 0, lab + before, 0)
        before += n
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    with daemon(roifs_bin, c1, m1) as d1, daemon(roifs_bin, c2, m2) as d2:
        got = {}

        def right_half():
            got["x"] = zarr.open(str(m2), mode="r")[:, 112:224]

        t = threading.Thread(target=right_half, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), f"the read hangs: mount 2 made {d2.status()['calls']} calls"
        np.testing.assert_array_equal(got["x"], want[:, 112:224])
        assert (d1.status()["calls"], d2.status()["calls"]) == (2, 2)
        np.testing.assert_array_equal(zarr.open(str(m2), mode="r")[...], want)
        assert (d1.status()["calls"], d2.status()["calls"]) == (2, 2)
        unmount(roifs_bin, d2, 10)
        unmount(roifs_bin, d1, 10)


# ---------------------------------------------------------------- the Fractal example

sys.path.insert(0, str(REPO / "scripts"))
import fractal_demo  # noqa: E402  (scripts/: the example's image and its numpy references)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("first_down", ["nuclei", "organoids"])
def test_fractal_two_steps_end_to_end(tmp_path, roifs_bin, first_down):
    """config/fractal-organoids.ini and fractal-nuclei.ini as shipped, on the example's image:
    step 2 takes step 1's presented image as input, step 1's masking ROI table as ROIs and
    step 1's labels (level 1, read at level 0) as mask. Read with zarr-python: both label
    images equal the numpy/scipy references, nuclei only inside organoids, each mount's calls
    equal to its ROI count; the presented image's own files are the input's; both steps
    exported into a copy of the image (export --into); then either mount unmounted first, and
    no process left."""
    for name in ("fractal-organoids.ini", "fractal-nuclei.ini"):
        shutil.copy(REPO / "config" / name, tmp_path / name)
    data = tmp_path / "fractal"
    data.mkdir()
    levels = fractal_demo.make_image(data)
    organoids = fractal_demo.organoids_reference(levels)
    nuclei, org0 = fractal_demo.nuclei_reference(levels, organoids)
    assert organoids.max() == len(fractal_demo.ORGANOIDS) and nuclei.max() > 20
    m1, m2 = data / "organoids", data / "nuclei"
    with daemon(roifs_bin, tmp_path / "fractal-organoids.ini", m1) as d1, \
            daemon(roifs_bin, tmp_path / "fractal-nuclei.ini", m2) as d2:
        got_nuclei = zarr.open(str(m2 / "labels" / "nuclei" / "0"), mode="r")[...]
        got_organoids = zarr.open(str(m2 / "labels" / "organoids" / "1"), mode="r")[...]
        np.testing.assert_array_equal(got_organoids, organoids)
        np.testing.assert_array_equal(got_nuclei, nuclei)
        assert not np.any((got_nuclei > 0) & (org0 == 0)), "a nucleus outside the organoids"
        # the image itself, read through both mounts
        np.testing.assert_array_equal(zarr.open(str(m2 / "0"), mode="r")[...], levels[0])
        assert (m2 / "0" / ".zarray").read_bytes() == \
            (data / "image.zarr" / "0" / ".zarray").read_bytes()
        labels = json.loads((m2 / "labels" / ".zattrs").read_text())["labels"]
        assert sorted(labels) == ["nuclei", "organoids"]
        s1, s2 = d1.status(), d2.status()
        assert s1["rois"]["failed"] == s2["rois"]["failed"] == 0, (s1["errors"], s2["errors"])
        assert (s1["calls"], s2["calls"]) == (4, organoids.max())
        if first_down == "nuclei":  # both steps written into a copy of the image
            copy = tmp_path / "copy.zarr"
            shutil.copytree(data / "image.zarr", copy)
            for step in ("fractal-organoids.ini", "fractal-nuclei.ini"):
                r = run_roifs(roifs_bin, "export", "--into", copy, tmp_path / step, timeout=120)
                assert r.returncode == 0, r.stderr
            assert json.loads((copy / "labels" / ".zattrs").read_text())["labels"] == \
                ["organoids", "nuclei"]
            np.testing.assert_array_equal(zarr.open(str(copy / "labels" / "nuclei" / "0"),
                                                    mode="r")[...], nuclei)
            np.testing.assert_array_equal(zarr.open(str(copy / "labels" / "organoids" / "1"),
                                                    mode="r")[...], organoids)
            assert (d1.status()["calls"], d2.status()["calls"]) == (4, organoids.max())
        down = {"nuclei": (d2, d1), "organoids": (d1, d2)}[first_down]
        unmount(roifs_bin, down[0], 10)
        if first_down == "organoids":  # the second mount lives on and serves what it has
            assert d2.proc.poll() is None
            np.testing.assert_array_equal(
                zarr.open(str(m2 / "labels" / "nuclei" / "0"), mode="r")[...], nuclei)
        assert no_stuck_threads(down[1].proc.pid)
        unmount(roifs_bin, down[1], 10)
    assert not is_mounted(m1) and not is_mounted(m2)
