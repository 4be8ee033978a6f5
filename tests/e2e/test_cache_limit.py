"""[cache] max_size (SPEC §3): the chunk files of the cache stay within the limit, the least
recently used chunks going first; an evicted chunk is made again when it is read, with the
same bytes, from the stored ROI results (max_size bounds the chunk files; results are kept); a
cache over a lowered limit is trimmed at mount, oldest files first."""
import os
import time

import numpy as np
import zarr

from conftest import chunk_key, make_task, read_bytes

SHAPE, CHUNKS = (64, 64), (16, 16)  # 4 x 4 chunks of 512 bytes (uncompressed <u2)
CHUNK_BYTES = 16 * 16 * 2


def limit_task(tmp_path, max_size):
    data = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    rois = [((y, y + 16), (x, x + 16)) for y in range(0, 64, 16) for x in range(0, 64, 16)]
    task = make_task(tmp_path, data, CHUNKS, rois=rois,
                     process={"builtin": "add", "param.value": 1, "threads": 2,
                              "readahead": 0},
                     output={"compressor": "none"},
                     sections={"cache": {"max_size": max_size}})
    return task, data + 1


def cached(task):
    d = task.cache / "chunks"
    return {int(n) for n in os.listdir(d) if n.isdigit()}


def chunk_id(idx):
    return idx[0] * 4 + idx[1]


def test_least_recently_used_chunks_go_first(tmp_path, mount):
    task, ref = limit_task(tmp_path, 4 * CHUNK_BYTES)
    order = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    with mount(task.config) as m:
        for idx in order:
            read_bytes(m / chunk_key(idx))
        # six computed, room for four: the two oldest went
        assert cached(task) == {chunk_id(i) for i in order[2:]}
        st = m.status()
        assert st["cache"] == {"bytes": 4 * CHUNK_BYTES, "max_size": 4 * CHUNK_BYTES,
                               "evicted": 2}, st["cache"]
        assert st["chunks"]["cached"] == 4, st["chunks"]
        # reading (0, 2) again makes it the most recently used: (0, 3) goes next
        time.sleep(0.01)
        read_bytes(m / chunk_key((0, 2)))
        read_bytes(m / chunk_key((1, 2)))
        assert cached(task) == {chunk_id(i) for i in [(0, 2), (1, 0), (1, 1), (1, 2)]}
        calls = m.status()["calls"]
        # an evicted chunk is made again, with the same bytes, from its stored ROI result
        got = np.frombuffer(read_bytes(m / chunk_key((0, 0))), "<u2").reshape(CHUNKS)
        np.testing.assert_array_equal(got, ref[0:16, 0:16])
        assert m.status()["calls"] == calls
        # the whole array, through zarr-python, stays correct while chunks come and go
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert len(cached(task)) <= 4
        st = m.status()
        assert st["cache"]["bytes"] <= 4 * CHUNK_BYTES, st["cache"]
        assert st["errors"] == [], st["errors"]


def test_lowered_limit_trims_the_cache_at_mount(tmp_path, mount):
    task, ref = limit_task(tmp_path, "1M")
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
    assert len(cached(task)) == 16
    # make the modification times tell the order: chunk 5 newest, then 9
    now = time.time()
    for cid in cached(task):
        os.utime(task.cache / "chunks" / str(cid), (now - 100, now - 100))
    os.utime(task.cache / "chunks" / "9", (now - 10, now - 10))
    os.utime(task.cache / "chunks" / "5", (now, now))
    task.config.write_text(task.config.read_text().replace("max_size = 1M",
                                                           f"max_size = {2 * CHUNK_BYTES}"))
    with mount(task.config) as m:
        assert cached(task) == {5, 9}
        st = m.status()
        assert st["cache"]["evicted"] == 14 and st["chunks"]["cached"] == 2, st
        # the two kept are served as they are
        for cid, idx in ((5, (1, 1)), (9, (2, 1))):
            got = np.frombuffer(read_bytes(m / chunk_key(idx)), "<u2").reshape(CHUNKS)
            np.testing.assert_array_equal(got, ref[idx[0] * 16:idx[0] * 16 + 16,
                                                   idx[1] * 16:idx[1] * 16 + 16])
        assert m.status()["calls"] == 0
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert len(cached(task)) == 2
