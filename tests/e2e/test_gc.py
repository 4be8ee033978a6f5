"""Garbage collection (issue 19 item 2): `roifs check` counts the ROIs and chunks cached,
stale and to compute; `roifs clean --unused CONFIG` removes the results and chunk files no
current key refers to, and exactly those: what remains is what the current keys need (a mount
afterwards computes only the ROIs check said were to compute); it is safe while a mount of the
configuration reads, refuses while a mount serves another version of it, and a kill -9 in the
middle of the compaction loses nothing current."""
import itertools
import os
import re
import signal
import socket
import struct
import subprocess
import time

import numpy as np
import pytest
import zarr

from conftest import PY, added_within, make_task, run_roifs, set_option, write_rois

SHAPE, CH = (64, 64), (16, 16)
HALO = 1
ROIS = [((0, 10), (0, 10)), ((4, 20), (4, 20)), ((20, 30), (0, 40)), ((30, 50), (30, 50)),
        ((40, 64), (0, 12)), ((0, 16), (48, 64)), ((10, 14), (30, 60)), ((50, 60), (50, 60)),
        ((33, 47), (2, 9)), ((18, 26), (18, 26)), ((56, 64), (20, 40)), ((2, 6), (40, 44))]

COUNT = """\
import os, sys, numpy as np
with open({counter!r}, "a") as f:
    f.write(os.environ["ROIFS_START"] + "\\n")
a = np.frombuffer(sys.stdin.buffer.read(), "<i4")
sys.stdout.buffer.write((a + int(os.environ["ROIFS_PARAM_VALUE"])).astype("<i4").tobytes())
"""


def job(tmp_path, rois=ROIS):
    data = np.random.default_rng(7).integers(0, 1000, SHAPE, dtype="<i4")
    counter = tmp_path / "counter"
    (tmp_path / "f.py").write_text(COUNT.format(counter=str(counter)))
    task = make_task(tmp_path, data, CH, rois=rois,
                     process={"command": f"{PY} f.py", "param.value": 1, "threads": 2},
                     output={"compressor": "blosc", "fill_value": -1},
                     sections={"rois": {"halo": f"{HALO},{HALO}"}})
    return task, data, counter


def records(cache):
    """The keys of the records in the result packs (layout 2), one per stored result."""
    keys = []
    for pack in sorted((cache / "results").glob("pack-*")):
        data, off = pack.read_bytes(), 0
        while off + 56 <= len(data) and data[off:off + 7] == b"roifsP1":
            keys.append(data[off + 8:off + 24])
            off += 56 + struct.unpack_from("<Q", data, off + 32)[0]
    return keys


def chunk_files(cache):
    return sorted(int(n) for n in os.listdir(cache / "chunks") if n.isdigit())


def census(roifs_bin, config):
    r = run_roifs(roifs_bin, "check", config)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    rois = re.search(r"^ROIs: +(\d+) cached .*?, (\d+) to compute", out, re.M)
    res = re.search(r"^results: .*?; (\d+) stale", out, re.M)
    ch = re.search(r"^chunks: +(\d+) cached, (\d+) stale .*?, (\d+) to compute", out, re.M)
    assert rois and res and ch, out
    return {"rois_cached": int(rois[1]), "rois_to_compute": int(rois[2]),
            "results_stale": int(res[1]), "chunks_cached": int(ch[1]),
            "chunks_stale": int(ch[2]), "chunks_to_compute": int(ch[3])}


def read_region(roi):
    return tuple((max(0, a - HALO), min(s, b + HALO)) for (a, b), s in zip(roi, SHAPE))


def touches(roi, block):
    return all(a < d and c < b for (a, b), (c, d) in zip(read_region(roi), block))


def chunk_rois(rois):
    """{chunk id: [indices of the ROIs touching it, in list order]}."""
    out = {}
    for i, roi in enumerate(rois):
        ranges = [range(a // c, (b - 1) // c + 1) for (a, b), c in zip(roi, CH)]
        for idx in itertools.product(*ranges):
            out.setdefault(idx[0] * (SHAPE[1] // CH[1]) + idx[1], []).append(i)
    return out


def test_check_counts_and_clean_unused_keeps_exactly_the_current(tmp_path, mount, roifs_bin):
    task, data, counter = job(tmp_path)
    assert run_roifs(roifs_bin, "warm", task.config, timeout=60).returncode == 0
    assert census(roifs_bin, task.config) == {
        "rois_cached": 12, "rois_to_compute": 0, "results_stale": 0,
        "chunks_cached": len(chunk_rois(ROIS)), "chunks_stale": 0, "chunks_to_compute": 0}
    # an edit: three ROIs removed, one moved; and one input chunk rewritten
    new = [r for i, r in enumerate(ROIS) if i not in (1, 5, 10)]
    new[2] = ((41, 52), (13, 29))
    write_rois(task, new)
    block = ((32, 48), (0, 16))
    data[32:48, 0:16] += 500
    zarr.open(str(task.input), mode="r+")[32:48, 0:16] = data[32:48, 0:16]
    same = [r for r in new if r in ROIS and not touches(r, block)]  # keys unchanged
    old_chunks, new_chunks = chunk_rois(ROIS), chunk_rois(new)

    def unchanged(cid):
        old = [ROIS[i] for i in old_chunks[cid]]
        cur = [new[i] for i in new_chunks.get(cid, [])]
        return cur == old and all(r in same for r in cur)

    current = [c for c in old_chunks if unchanged(c)]
    want = {"rois_cached": len(same), "rois_to_compute": len(new) - len(same),
            "results_stale": 12 - len(same), "chunks_cached": len(current),
            "chunks_stale": len(old_chunks) - len(current),
            "chunks_to_compute": len(new_chunks) - len(current)}
    assert 0 < len(same) < len(new) and 0 < len(current) < len(new_chunks)
    assert census(roifs_bin, task.config) == want
    r = run_roifs(roifs_bin, "clean", "--unused", task.config, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"results: {12 - len(same)} removed" in r.stdout, r.stdout
    assert f"chunks:  {len(old_chunks) - len(current)} stale files removed" in r.stdout, r.stdout
    # what remains is exactly what the current keys need
    assert len(records(task.cache)) == len(set(records(task.cache))) == len(same)
    assert chunk_files(task.cache) == sorted(current)
    assert census(roifs_bin, task.config) == {**want, "results_stale": 0, "chunks_stale": 0}
    # and it is enough: a mount computes only what check said, once each
    counter.unlink()
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], added_within(data, new))
        st = m.status()
    assert st["calls"] == len(new) - len(same)
    assert st["results"]["reused"] == len(same)
    assert len(counter.read_text().split()) == len(new) - len(same)
    # nothing left to remove
    r = run_roifs(roifs_bin, "clean", "--unused", task.config)
    assert r.returncode == 0 and "results: 0 removed" in r.stdout, r.stdout


def test_clean_unused_while_a_mount_reads(tmp_path, mount, roifs_bin):
    """A mount of the same configuration keeps serving the right data and computes nothing
    again while clean --unused runs; a mount of another version of the configuration (the
    file edited since it started) makes clean --unused refuse, keeping what it needs."""
    task, data, counter = job(tmp_path)
    ref = added_within(data, ROIS)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        set_option(task, "param.value", 2)  # the mount serves value 1, the file says 2
        r = run_roifs(roifs_bin, "clean", "--unused", task.config)
        assert r.returncode == 1, r.stdout + r.stderr
        assert (f"in use by {task.config} (pid {m.proc.pid} on {socket.gethostname()}), which serves another version "
                "of this configuration") in r.stderr, r.stderr
        assert len(records(task.cache)) == 12
        # value 2 warmed next to the mount: unused for value 1, and its chunk files replace
        # the mount's
        assert run_roifs(roifs_bin, "warm", task.config, timeout=60).returncode == 0
        assert len(records(task.cache)) == 24
        set_option(task, "param.value", 1)
        for _ in range(2):
            r = run_roifs(roifs_bin, "clean", "--unused", task.config)
            assert r.returncode == 0, r.stderr
            np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert len(records(task.cache)) == 12
        assert m.status()["calls"] == 12


def big_job(tmp_path):
    """Results worth a compaction that takes a moment: 64 ROIs of 128 x 128 float32 noise."""
    shape, ch = (1024, 1024), (128, 128)
    data = np.random.default_rng(3).random(shape, dtype="<f4")
    rois = [((y, y + 128), (x, x + 128)) for y in range(0, 1024, 128) for x in range(0, 1024, 128)]
    task = make_task(tmp_path, data, ch, rois=rois,
                     process={"builtin": "add", "param.value": 1, "threads": 2},
                     output={"compressor": "none"})
    return task, data


@pytest.mark.timeout(300)
def test_kill_during_compaction_loses_nothing_current(tmp_path, mount, roifs_bin):
    task, data = big_job(tmp_path)
    results = task.cache / "results"
    hit = False
    for attempt in range(12):
        # a set of unused results: warmed with another value, then back
        set_option(task, "param.value", 10 + attempt)
        assert run_roifs(roifs_bin, "warm", task.config, timeout=120).returncode == 0
        set_option(task, "param.value", 1)
        assert run_roifs(roifs_bin, "warm", task.config, timeout=120).returncode == 0
        before = set(os.listdir(results))
        p = subprocess.Popen([roifs_bin, "clean", "--unused", str(task.config)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # killed once a new pack holds copies while the old ones are still there
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline:
            now = set(os.listdir(results))
            if now - before and before <= now:
                os.kill(p.pid, signal.SIGKILL)
                hit = True
                break
        p.wait(timeout=60)
        if hit:
            break
    assert hit, "never caught the compaction in the middle"
    with mount(task.config) as m:  # every current result is there
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], data + 1)
        assert m.status()["calls"] == 0
    r = run_roifs(roifs_bin, "clean", "--unused", task.config, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(set(records(task.cache))) == len(records(task.cache)) == 64
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], data + 1)
        assert m.status()["calls"] == 0
