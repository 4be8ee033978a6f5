"""Reliability (issue 4): exactly-once between processes sharing a cache, kill -9 at random
moments, no stale results after any change, and cache faults (full, read-only, removed)."""
import concurrent.futures
import contextlib
import errno
import os
import random
import signal
import subprocess
import time

import numpy as np
import pytest
import zarr

from conftest import (PY, chunk_slices, all_chunks, is_mounted, lazy_unmount, make_task,
                      mounted, read_bytes, write_config)

# A command processor that counts its invocations (one line per ROI run) and adds 7.
ADD7 = ("echo $ROIFS_ROI >> {counter}; sleep {delay}; "
        "{py} -c 'import sys,numpy as n;a=n.frombuffer(sys.stdin.buffer.read(),\"<i4\");"
        "sys.stdout.buffer.write((a+7).astype(\"<i4\").tobytes())'")


def counter_lines(path):
    return path.read_text().split() if path.exists() else []


def spanning_task(tmp_path, delay="0", threads=2, readahead=None, seed=3):
    """A 2-D <i4 array, 8x8 chunks of 16x16, ROIs that overlap and span chunks."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 1000, (64, 64), dtype="<i4")
    rois = []
    for _ in range(24):
        y, x = rng.integers(0, 56, 2)
        h, w = rng.integers(4, 24, 2)
        rois.append(((int(y), int(min(y + h, 64))), (int(x), int(min(x + w, 64)))))
    counter = tmp_path / "counter"
    process = {"command": ADD7.format(counter=counter, delay=delay, py=PY), "threads": threads}
    if readahead is not None:
        process["readahead"] = readahead
    task = make_task(tmp_path, data, (16, 16), rois=rois, process=process,
                     output={"compressor": "blosc", "fill_value": -1})
    ref = np.full(data.shape, -1, "<i4")
    for (y0, y1), (x0, x1) in rois:
        ref[y0:y1, x0:x1] = data[y0:y1, x0:x1] + 7
    return task, ref, counter


def read_all(mnt):
    return zarr.open(str(mnt), mode="r")[:]


def test_two_mounts_share_one_cache_exactly_once(tmp_path, mount):
    task, ref, counter = spanning_task(tmp_path, delay="0.05")
    other = tmp_path / "mnt2"
    with mount(task.config) as a, mount(task.config, mnt=other) as b:
        order = all_chunks((64, 64), (16, 16))

        def read_chunks(m, chunks):
            z = zarr.open(str(m.path), mode="r")
            return [(idx, z[chunk_slices(idx, (64, 64), (16, 16))]) for idx in chunks]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            jobs = [pool.submit(read_chunks, m, list(reversed(order)) if i % 2 else order)
                    for i, m in enumerate((a, b, a, b))]
            for j in jobs:
                for idx, block in j.result(timeout=120):
                    np.testing.assert_array_equal(block, ref[chunk_slices(idx, (64, 64), (16, 16))])
        runs = counter_lines(counter)
        assert sorted(runs, key=int) == [str(i) for i in range(24)], \
            f"ROIs ran {len(runs)} times in total over two mounts: {sorted(runs, key=int)}"
        assert a.status()["calls"] + b.status()["calls"] == 24


def test_kill_9_at_random_moments(tmp_path, roifs_bin):
    """Kill the daemon mid-compute many times; every remount serves exactly the right array,
    and work finished before a crash is kept."""
    task, ref, counter = spanning_task(tmp_path, delay="0.03", threads=2)
    rng = random.Random(11)
    kills = 0
    for i in range(8):
        mnt = tmp_path / f"k{i}"
        mnt.mkdir()
        proc = subprocess.Popen([roifs_bin, "mount", "-f", str(task.config), str(mnt)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 20
            while not is_mounted(mnt):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.02)
            reader = subprocess.Popen([PY, "-c", f"import zarr; zarr.open('{mnt}','r')[:]"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.05, 0.6))
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
            proc.wait(timeout=10)
            lazy_unmount(mnt)
            reader.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            if is_mounted(mnt):
                lazy_unmount(mnt)
        # No temporary or partial file is ever taken for a result.
        with mounted(roifs_bin, task.config, mnt=tmp_path / f"v{i}") as m:
            np.testing.assert_array_equal(read_all(m.path), ref)
    runs = counter_lines(counter)
    assert set(runs) == {str(i) for i in range(24)}
    # A kill can only lose the ROIs in flight (threads = 2, readahead 2, chunks of a few
    # ROIs): everything finished before it is kept.
    assert len(runs) <= 24 + kills * 8, f"{len(runs)} runs for 24 ROIs and {kills} kills"


def test_no_stale_results_after_changes(tmp_path, mount):
    data = np.arange(32 * 32, dtype="<u2").reshape(32, 32)
    rois = [((0, 20), (0, 20)), ((10, 32), (5, 30))]
    task = make_task(tmp_path, data, (8, 8), rois=rois,
                     process={"builtin": "add", "param.value": "1"},
                     output={"compressor": "blosc"})
    z = zarr.open(str(task.input), mode="r+")

    def expect(values, value=1, rois=rois, fill=0):
        ref = np.full(values.shape, fill, values.dtype)
        for (y0, y1), (x0, x1) in rois:
            ref[y0:y1, x0:x1] = values[y0:y1, x0:x1] + value
        return ref

    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m.path), expect(data))
    # 1. an input chunk rewritten while unmounted
    data[0:8, 0:8] += 100
    z[0:8, 0:8] = data[0:8, 0:8]
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m.path), expect(data))
        # 2. an input chunk rewritten while mounted: the next read sees it
        time.sleep(0.01)
        data[16:24, 8:16] += 50
        z[16:24, 8:16] = data[16:24, 8:16]
        np.testing.assert_array_equal(read_all(m.path), expect(data))
    # 3. the processor's params
    text = task.config.read_text()
    task.config.write_text(text.replace("param.value = 1", "param.value = 5"))
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m.path), expect(data, 5))
    # 4. the ROI list
    rois2 = [((0, 32), (0, 8))]
    task.rois_file.write_text("0:32, 0:8\n")
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m.path), expect(data, 5, rois2))
    # 5. the output encoding (fill value)
    task.config.write_text(task.config.read_text().replace("[output]", "[output]\nfill_value = 9"))
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m.path), expect(data, 5, rois2, 9))
    # 6. the input's metadata (a new fill value for missing input chunks is metadata too)
    zarr.open(str(task.input), mode="r+").attrs["note"] = "attributes alone change nothing"
    meta = (task.input / ".zarray").read_text().replace('"fill_value": 0', '"fill_value": 3')
    (task.input / ".zarray").write_text(meta)
    for key in ("3.0", "3.1"):
        (task.input / key).unlink()
    data[24:32, 0:16] = 3
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m.path), expect(data, 5, rois2, 9))


@contextlib.contextmanager
def small_tmpfs(path, size):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)])


def test_cache_full_then_recovers(tmp_path, mount):
    data = np.random.default_rng(5).integers(0, 2**31, (256, 256), dtype="<i4")
    rois = [((0, 256), (c * 64, c * 64 + 64)) for c in range(4)]
    with small_tmpfs(tmp_path / "small", "300k") as small:
        task = make_task(tmp_path, data, (64, 64), rois=rois,
                         process={"builtin": "copy"},
                         output={"compressor": "none"},
                         sections={"cache": {"dir": str(small / "cache")}})
        with mount(task.config) as m:
            z = zarr.open(str(m.path), mode="r")
            ok = failed = 0
            for idx in all_chunks((256, 256), (64, 64)):
                try:
                    read_bytes(m / ".".join(map(str, idx)))
                    ok += 1
                except OSError as e:
                    assert e.errno == errno.EIO
                    failed += 1
            assert ok and failed, (ok, failed)
            assert "No space left on device" in m.log_text()
            # no partial file is ever served: what was served is right
            for f in (small / "cache" / "chunks").iterdir():
                assert not f.name.startswith(".tmp"), "a temporary file was left behind"
            subprocess.run(["mount", "-o", "remount,size=4m", str(small)], check=True)
            np.testing.assert_array_equal(z[:], data)
            assert m.alive()


def test_cache_read_only_then_recovers(tmp_path, mount):
    data = np.arange(64 * 64, dtype="<i2").reshape(64, 64)
    with small_tmpfs(tmp_path / "fs", "4m") as fs:
        task = make_task(tmp_path, data, (32, 32), rois=[((0, 64), (0, 64))],
                         process={"builtin": "add", "param.value": "2"},
                         sections={"cache": {"dir": str(fs / "cache")}})
        with mount(task.config) as m:
            subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
            with pytest.raises(OSError) as e:
                read_bytes(m / "0.0")
            assert e.value.errno == errno.EIO
            assert "Read-only file system" in m.log_text()
            subprocess.run(["mount", "-o", "remount,rw", str(fs)], check=True)
            np.testing.assert_array_equal(read_all(m.path), data + 2)


def test_cache_removed_under_a_running_mount(tmp_path, mount):
    data = np.arange(64 * 64, dtype="<i2").reshape(64, 64)
    task = make_task(tmp_path, data, (32, 32), rois=[((0, 40), (0, 40)), ((30, 64), (0, 64))],
                     process={"builtin": "add", "param.value": "2"})
    ref = np.zeros_like(data)
    ref[0:40, 0:40] = data[0:40, 0:40] + 2
    ref[30:64, :] = data[30:64, :] + 2
    with mount(task.config) as m:
        z = zarr.open(str(m.path), mode="r")
        np.testing.assert_array_equal(z[0:32, 0:32], ref[0:32, 0:32])
        subprocess.run(["rm", "-rf", str(task.cache)], check=True)
        np.testing.assert_array_equal(z[:], ref)
        assert (task.cache / "format").read_text() == "roifs-cache 4\n"  # cache layout 4
    with mount(task.config) as m:  # the recreated cache is a valid cache
        np.testing.assert_array_equal(read_all(m.path), ref)
        assert m.status()["calls"] == 0
