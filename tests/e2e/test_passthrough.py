"""FUSE passthrough (docs/design.md): where the kernel allows it, an open chunk is read by
the kernel straight from its cache file, so the daemon answers no READ for it; the bytes are
the same as through the daemon, every reader sees them (read, mmap, many threads at once),
and a chunk recomputed while its previous version is still open is never served stale."""
import concurrent.futures
import errno
import gzip
import mmap
import os
import re
import threading
import time

import numpy as np
import pytest
import zarr

from conftest import all_chunks, chunk_key, chunk_slices, make_task, read_bytes, run_roifs

SHAPE, CHUNKS = (40, 48), (16, 16)  # 3 x 3 chunks, edge chunks in both dimensions
ROIS = [((0, 40), (0, 48)), ((5, 30), (10, 40))]


def kernel_has_passthrough():
    """Linux >= 6.9 built with CONFIG_FUSE_PASSTHROUGH, and root (the kernel asks for
    CAP_SYS_ADMIN to register backing files)."""
    m = re.match(r"(\d+)\.(\d+)", os.uname().release)
    if os.geteuid() != 0 or tuple(map(int, m.groups())) < (6, 9):
        return False
    for path in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                return "CONFIG_FUSE_PASSTHROUGH=y" in f.read()
        except OSError:
            continue
    return True  # no config to read: the version says it can


def pt_task(tmp_path, compressor, passthrough=None):
    data = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    sections = {} if passthrough is None else {"mount": {"passthrough": passthrough}}
    task = make_task(tmp_path, data, CHUNKS, rois=ROIS,
                     process={"builtin": "add", "param.value": 1, "threads": 2},
                     output={"compressor": compressor}, sections=sections)
    return task, data + 1


@pytest.mark.parametrize("compressor", ["none", "blosc"])
@pytest.mark.parametrize("passthrough", [None, "false"])
def test_reads_pass_through_to_the_cache(tmp_path, mount, compressor, passthrough):
    task, ref = pt_task(tmp_path, compressor, passthrough)
    on = passthrough is None and kernel_has_passthrough()
    with mount(task.config) as m:
        # Cold: each chunk is computed at its open, then passed through.
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        # Warm, and again in the same mount: the same bytes by plain reads.
        first = {idx: read_bytes(m / chunk_key(idx)) for idx in all_chunks(SHAPE, CHUNKS)}
        for idx, data in first.items():
            assert read_bytes(m / chunk_key(idx)) == data, idx
            assert os.stat(m / chunk_key(idx)).st_size == len(data), idx
        st = m.status()["fuse"]
        assert st["passthrough"] is on, st
        if on:
            assert st["chunk_reads"] == 0, st
        else:
            assert st["chunk_reads"] >= len(first), st
            assert st["passthrough_off"], st
    # The bytes are those of a mount without passthrough (remount: served from the cache).
    other = "false" if passthrough is None else None
    task2, _ = pt_task(tmp_path / "other", compressor, other)
    with mount(task2.config) as m:
        for idx, data in first.items():
            assert read_bytes(m / chunk_key(idx)) == data, idx


def test_mmap_and_many_threads(tmp_path, mount):
    task, ref = pt_task(tmp_path, "none")
    keys = [chunk_key(idx) for idx in all_chunks(SHAPE, CHUNKS)]
    expect = {chunk_key(idx): np.ascontiguousarray(ref[chunk_slices(idx, SHAPE, CHUNKS)])
              for idx in all_chunks(SHAPE, CHUNKS)}
    with mount(task.config) as m:
        # mmap of a chunk file (no compressor: the file is the chunk's bytes; an edge chunk
        # is stored whole, zero-padded)
        for key in keys:
            with open(m / key, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
                a = np.frombuffer(mm, "<u2").reshape(CHUNKS).copy()
            e = expect[key]
            np.testing.assert_array_equal(a[:e.shape[0], :e.shape[1]], e)
        # 16 threads opening the same few chunks at once: the opens of one chunk share one
        # backing file; each one reads the right bytes.
        want = {key: read_bytes(m / key) for key in keys}
        errors = []

        def worker(seed):
            rng = np.random.default_rng(seed)
            for _ in range(150):
                key = keys[int(rng.integers(0, 3))]  # mostly the same three chunks
                fds = [os.open(m / key, os.O_RDONLY) for _ in range(int(rng.integers(1, 4)))]
                try:
                    for fd in fds:
                        got = os.pread(fd, len(want[key]) + 1, 0)
                        if got != want[key]:
                            errors.append(key)
                finally:
                    for fd in fds:
                        os.close(fd)

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            list(ex.map(worker, range(16)))
        assert not errors
        st = m.status()
        assert st["calls"] == len(ROIS)
        if kernel_has_passthrough():
            fuse = {k: st["fuse"][k] for k in ("passthrough", "chunk_reads")}
            assert fuse == {"passthrough": True, "chunk_reads": 0}, st["fuse"]


def change_input(task, data):
    """Rewrites input chunk (0, 0) with new values; returns the new expected output."""
    data = data.copy()
    data[0:16, 0:16] += 1000
    zarr.open(str(task.input), mode="r+")[0:16, 0:16] = data[0:16, 0:16]
    return data + 1


def decode(raw):
    return np.frombuffer(raw, "<u2").reshape(CHUNKS)


def test_recomputed_while_open_is_served_at_once_never_stale(tmp_path, mount):
    """The kernel cannot switch an open inode to another backing file: a chunk recomputed
    while its previous version is still open gets a new inode (test_versions.py), so the new
    open is served at once with the new version, and the open file keeps the old one."""
    task, ref = pt_task(tmp_path, "none")
    data = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    m_key = chunk_key((0, 0))
    with mount(task.config) as m:
        old = m / m_key
        ino = os.stat(old).st_ino
        fd = os.open(old, os.O_RDONLY)
        before = os.pread(fd, 1 << 20, 0)
        np.testing.assert_array_equal(decode(before), ref[0:16, 0:16])
        for _ in range(2):
            ref = change_input(task, data)
            data = data.copy()
            data[0:16, 0:16] += 1000
            t0 = time.monotonic()
            np.testing.assert_array_equal(decode(read_bytes(m / m_key)), ref[0:16, 0:16])
            assert time.monotonic() - t0 < 1.5
            assert os.pread(fd, 1 << 20, 0) == before  # the open file keeps its version
            assert os.fstat(fd).st_ino == ino
            assert os.stat(old).st_ino != ino
        os.close(fd)
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[0:16, 0:16],
                                      ref[0:16, 0:16])
        assert m.status()["fuse"]["passthrough"] is kernel_has_passthrough()


def test_passthrough_key_is_checked(tmp_path, roifs_bin):
    task, _ = pt_task(tmp_path, "none", "sometimes")
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 2, r
    line = next(i for i, l in enumerate(task.config.read_text().splitlines(), 1)
                if l.startswith("passthrough"))
    assert f"{task.config}:{line}:" in r.stderr and "passthrough" in r.stderr, r.stderr
