"""The FUSE device as the daemon sees it (src/fs/devio.c): requests counted by opcode in the
status file (`fuse.requests`), the terminal ioctl answered ENOTTY, and the polling of the
device before blocking, which stops when requests stop (an idle mount uses no CPU)."""
import json
import os
import time

import numpy as np
import pytest
import zarr

from conftest import all_chunks, chunk_key, make_task, wait_for
from test_passthrough import kernel_has_passthrough

SHAPE, CHUNKS = (32, 48), (16, 16)  # 2 x 3 chunks


def task_of(tmp_path, sections=None):
    data = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    return make_task(tmp_path, data, CHUNKS, rois=[((0, 32), (0, 48))],
                     process={"builtin": "add", "param.value": 1},
                     output={"compressor": "none"}, sections=sections), data + 1


def requests(m):
    """fuse.requests, read with os.open/os.read (no isatty ioctl of its own)."""
    fd = os.open(m / ".roifs" / "status", os.O_RDONLY)
    try:
        text = b""
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            text += b
    finally:
        os.close(fd)
    return json.loads(text)["fuse"]["requests"]


def delta(a, b):
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) != a.get(k, 0)}


def daemon_cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_requests_counted_per_open(tmp_path, mount):
    """N opens of a computed chunk by Python's open() + isatty() + read() + close(): exactly N
    OPEN, 2N IOCTL (open() asks isatty too; answered ENOTTY) and, eventually, N RELEASE; no LOOKUP or GETATTR (the
    kernel keeps the entry and the attributes); READs only without passthrough."""
    task, ref = task_of(tmp_path)
    n = 20
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        want = (m / chunk_key((1, 2))).read_bytes()
        s0 = requests(m)
        s1 = requests(m)
        own = delta(s0, s1)  # what reading the status file itself adds (before the next one)
        assert own.get("OPEN") == 1 and "IOCTL" not in own, own
        for _ in range(n):
            with open(m / chunk_key((1, 2)), "rb") as f:
                assert not f.isatty()
                assert f.read() == want
        s2 = requests(m)
        d = delta(s1, s2)
        assert d.get("OPEN", 0) - own["OPEN"] == n, d
        assert d.get("IOCTL", 0) == 2 * n + own.get("IOCTL", 0), d
        assert d.get("LOOKUP", 0) == own.get("LOOKUP", 0), d
        assert d.get("GETATTR", 0) == own.get("GETATTR", 0), d
        if kernel_has_passthrough():
            assert d.get("READ", 0) == own.get("READ", 0), d
        else:
            assert d.get("READ", 0) > n, d
        # RELEASE is sent in the background after close(): the n of them, and the status
        # files' own (one per status read since s1, at most)
        reads = [0]

        def released():
            reads[0] += 1
            got = delta(s1, requests(m)).get("RELEASE", 0)
            assert got <= n + reads[0] + 1, got
            return got >= n

        wait_for(released, 10, "the RELEASEs")


def test_requests_without_passthrough_count_reads(tmp_path, mount):
    task, ref = task_of(tmp_path, sections={"mount": {"passthrough": "false"}})
    with mount(task.config) as m:
        s0 = requests(m)
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        d = delta(s0, requests(m))
        nchunks = len(list(all_chunks(SHAPE, CHUNKS)))
        assert d.get("READ", 0) >= nchunks, d
        assert d.get("OPEN", 0) >= nchunks, d
        assert m.status()["fuse"]["chunk_reads"] >= nchunks


def test_polling_stops_when_idle(tmp_path, mount):
    """With polling on (a 2 ms window), a burst of opens makes the daemon poll the device; once
    the reader stops, the daemon blocks: over 3 s of idleness it uses (almost) no CPU."""
    task, ref = task_of(tmp_path)
    env = os.environ | {"ROIFS_FUSE_POLL_US": "2000"}
    with mount(task.config, env=env) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        for _ in range(300):
            fd = os.open(m / chunk_key((0, 0)), os.O_RDONLY)
            os.read(fd, 1 << 16)
            os.close(fd)
        poll = m.status()["fuse"]["poll"]
        assert poll["us"] == 2000 and poll["polls"] > 0, poll
        time.sleep(0.1)
        c0, t0 = daemon_cpu_s(m.proc.pid), time.monotonic()
        time.sleep(3)
        used = daemon_cpu_s(m.proc.pid) - c0
        assert used <= 0.05, f"the idle mount used {used:.2f} s of CPU in " \
                             f"{time.monotonic() - t0:.1f} s; poll: {m.status()['fuse']['poll']}"


@pytest.mark.parametrize("setting", ["default", "0"])
def test_polling_off(tmp_path, mount, setting):
    """Off with ROIFS_FUSE_POLL_US=0, and by default (a 1 ms window measured slower on a quiet
    machine: bench/notes/fusepath.md)."""
    task, ref = task_of(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "ROIFS_FUSE_POLL_US"}
    if setting != "default":
        env["ROIFS_FUSE_POLL_US"] = setting
    with mount(task.config, env=env) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        for _ in range(50):
            (m / chunk_key((0, 1))).read_bytes()
        poll = m.status()["fuse"]["poll"]
        assert poll == {"us": 0, "polls": 0, "hits": 0, "pauses": 0, "cpu_s": 0.0}, poll
