"""One open file serves one version of its chunk for its whole life, with or without FUSE
passthrough (README "Reliability"): a reader that has read part of a chunk while another
process's open recomputes it after an input change goes on reading the old version (no torn
read through the shared page cache), with the old size in fstat, and mmap; the new opener
gets the new version at once, and stat shows it; once nobody holds the old version, the chunk
keeps its inode and no stale page is served."""
import mmap
import os
import threading
import zlib

import numpy as np
import pytest
import zarr

from conftest import make_task, read_bytes
from test_passthrough import kernel_has_passthrough

SHAPE = CHUNKS = (512, 512)  # one chunk of 512 KiB, larger than the kernel's readahead
MODES = [None, "false"]       # passthrough where the kernel allows it / [mount] passthrough = false


def version_task(tmp_path, passthrough):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 60000, SHAPE, dtype="<u2")  # barely compressible
    sections = {} if passthrough is None else {"mount": {"passthrough": passthrough}}
    task = make_task(tmp_path, data, CHUNKS, rois=[((0, 512), (0, 512))],
                     process={"builtin": "add", "param.value": 1, "threads": 1},
                     output={"compressor": "zlib"}, sections=sections)
    task.data = data
    return task


def change_input(task):
    """Zeroes a quarter of the input: the new chunk compresses to fewer bytes."""
    task.data = task.data.copy()
    task.data[:256, :256] = 0
    zarr.open(str(task.input), mode="r+")[:256, :256] = 0
    return (task.data + 1).astype("<u2")


def decode(raw):
    return np.frombuffer(zlib.decompress(raw), "<u2").reshape(SHAPE)


def check_mode(m, passthrough):
    on = passthrough is None and kernel_has_passthrough()
    assert m.status()["fuse"]["passthrough"] is on


@pytest.mark.parametrize("passthrough", MODES, ids=["passthrough", "no-passthrough"])
def test_no_torn_read_while_another_open_recomputes(tmp_path, mount, passthrough):
    task = version_task(tmp_path, passthrough)
    old = (task.data + 1).astype("<u2")
    with mount(task.config) as m:
        path = m / "0.0"
        fd = os.open(path, os.O_RDONLY)
        try:
            old_size = os.fstat(fd).st_size
            head = os.pread(fd, 4096, 0)  # the reader has read the start only
            new = change_input(task)
            # Another process opens the chunk: it is computed again, and served at once.
            fresh = read_bytes(path)
            np.testing.assert_array_equal(decode(fresh), new)
            assert os.stat(path).st_size == len(fresh) != old_size
            # The first reader goes on with the version it opened, to its end.
            assert os.fstat(fd).st_size == old_size
            rest = os.pread(fd, old_size, 4096)
            np.testing.assert_array_equal(decode(head + rest), old)
            assert os.pread(fd, old_size + 1, 0) == head + rest
            with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
                assert mm[:] == head + rest
            # A third reader, and the new opener again: the new version.
            assert read_bytes(path) == fresh
        finally:
            os.close(fd)
        assert read_bytes(path) == fresh
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], new)
        check_mode(m, passthrough)


@pytest.mark.parametrize("passthrough", MODES, ids=["passthrough", "no-passthrough"])
def test_new_version_takes_the_inode_when_nothing_is_open(tmp_path, mount, passthrough):
    """Read whole (the kernel caches its pages), closed; the input changes; the next open
    gets the new bytes, never a cached page of the old ones, under the same inode."""
    task = version_task(tmp_path, passthrough)
    with mount(task.config) as m:
        path = m / "0.0"
        first = read_bytes(path)
        ino = os.stat(path).st_ino
        assert read_bytes(path) == first  # from the page cache now
        new = change_input(task)
        got = read_bytes(path)
        np.testing.assert_array_equal(decode(got), new)
        st = os.stat(path)
        assert st.st_ino == ino and st.st_size == len(got)
        new2 = change_input(task)  # (the same change again: nothing to recompute)
        np.testing.assert_array_equal(decode(read_bytes(path)), new2)


@pytest.mark.parametrize("passthrough", MODES, ids=["passthrough", "no-passthrough"])
def test_many_readers_across_versions(tmp_path, mount, passthrough):
    """Rounds of four threads that open the chunk, read a piece, and go on reading to the end
    only after the input changed and another open recomputed it: each read whole decodes to
    the version current at its open, never a mix; the new opener gets the new one."""
    task = version_task(tmp_path, passthrough)
    current = (task.data + 1).astype("<u2")
    opened, changed = threading.Barrier(5), threading.Event()
    bad = []

    def reader(want):
        try:
            with open(m / "0.0", "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                parts = [f.read(8192)]
                opened.wait(10)
                changed.wait(10)
                while len(b"".join(parts)) < size and parts[-1]:
                    parts.append(f.read(65536))
            if not np.array_equal(decode(b"".join(parts)), want):
                bad.append("a read of another version")
        except Exception as e:  # a decode error is a torn read
            bad.append(repr(e))

    with mount(task.config) as m:
        for k in range(3):
            changed.clear()
            threads = [threading.Thread(target=reader, args=(current,)) for _ in range(4)]
            for t in threads:
                t.start()
            opened.wait(10)
            d = task.data.copy()
            d[k * 100:k * 100 + 50] = k
            zarr.open(str(task.input), mode="r+")[:] = d
            task.data = d
            current = (d + 1).astype("<u2")
            np.testing.assert_array_equal(decode(read_bytes(m / "0.0")), current)
            changed.set()
            for t in threads:
                t.join(30)
        assert not bad, bad[:5]
        np.testing.assert_array_equal(decode(read_bytes(m / "0.0")), current)
