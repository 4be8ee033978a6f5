"""[cache] max_size (docs/configuration.md): the cache (chunk files and stored ROI results) stays
within the limit: ROI results no current key names go first, then the least recently used chunks;
an evicted chunk is made again when it is read, with the same bytes, from the stored ROI results
(current results are kept); a cache over a lowered limit is trimmed at mount, unused results first,
then the oldest chunk files."""
import os
import time

import numpy as np
import zarr

from conftest import chunk_key, make_task, read_bytes, run_roifs, set_option

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


def result_bytes(task):
    return sum(p.stat().st_size for p in (task.cache / "results").glob("pack-*"))


def warm_results(task, roifs_bin):
    """Every ROI result stored, no chunk file kept: the limit then has room for a known
    number of chunks besides the results."""
    r = run_roifs(roifs_bin, "warm", task.config)
    assert r.returncode == 0, r.stderr
    for n in os.listdir(task.cache / "chunks"):
        os.unlink(task.cache / "chunks" / n)
    return result_bytes(task)


def chunk_id(idx):
    return idx[0] * 4 + idx[1]


def test_least_recently_used_chunks_go_first(tmp_path, mount, roifs_bin):
    task, ref = limit_task(tmp_path, "1M")
    results = warm_results(task, roifs_bin)
    limit = results + 4 * CHUNK_BYTES
    set_option(task, "max_size", limit)
    order = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    with mount(task.config) as m:
        for idx in order:
            read_bytes(m / chunk_key(idx))
        # six made, room for four besides the results: the two oldest went
        assert cached(task) == {chunk_id(i) for i in order[2:]}
        st = m.status()
        assert st["cache"] == {"bytes": limit, "chunk_bytes": 4 * CHUNK_BYTES,
                               "result_bytes": results, "max_size": limit, "evicted": 2,
                               "results_evicted": 0}, st["cache"]
        assert st["calls"] == 0
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
        assert st["cache"]["chunk_bytes"] <= 4 * CHUNK_BYTES, st["cache"]
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
    set_option(task, "max_size", result_bytes(task) + 2 * CHUNK_BYTES)
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


def test_unused_results_go_first_at_mount(tmp_path, mount, roifs_bin):
    task, ref = limit_task(tmp_path, "1M")
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
    one = result_bytes(task)
    set_option(task, "param.value", 2)  # every result of value 1 is unused now
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref + 1)
        assert m.status()["calls"] == 16
    assert result_bytes(task) > one
    # room for one set of results and every chunk: the unused results go, no chunk does
    set_option(task, "max_size", one + 16 * CHUNK_BYTES + 4096)
    with mount(task.config) as m:
        st = m.status()
        assert st["cache"]["results_evicted"] == 16 and st["cache"]["evicted"] == 0, st
        assert len(cached(task)) == 16
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref + 1)
        assert m.status()["calls"] == 0
    assert result_bytes(task) <= one + 4096
    set_option(task, "param.value", 1)  # those were removed: computed again
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert m.status()["calls"] == 16


def test_unused_result_goes_first_during_a_mount(tmp_path, mount, roifs_bin):
    """An input chunk rewritten under the mount makes its ROI's stored result unused; the new
    one takes the cache over the limit: the unused one goes, not a chunk file."""
    task, ref = limit_task(tmp_path, "1M")
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
    # room for the results, every chunk, and a few bytes more (a new result's record is not
    # exactly the size of the one it replaces), not for a second result
    set_option(task, "max_size", result_bytes(task) + 16 * CHUNK_BYTES + 64)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert m.status()["cache"]["evicted"] == 0
        z = zarr.open(str(task.input), mode="r+")
        z[0:16, 0:16] = z[0:16, 0:16] + 100
        ref[0:16, 0:16] += 100
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        st = m.status()
        assert st["calls"] == 1
        assert st["cache"]["results_evicted"] == 1 and st["cache"]["evicted"] == 0, st["cache"]
        assert len(cached(task)) == 16
        assert st["cache"]["bytes"] <= st["cache"]["max_size"], st["cache"]
