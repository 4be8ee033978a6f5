"""Load (docs/mounted-tree.md#what-each-element-holds): 16 reader processes read a mount of 10,000
overlapping ROIs at the same time, each the whole array with zarr-python in its own chunk order.
Every reader gets the numpy reference, nobody deadlocks (every reader has a deadline), the
processor runs exactly once per ROI, and the daemon's peak memory stays bounded.

The memory bound: the output is 4096 x 4096 uint32 (64 MiB), the input 4096 x 4096 uint8
(16 MiB, which the input reader may keep whole in its LRU). What roifs must hold at once is
the input LRU, the chunks in flight (demanded plus readahead, 256 KiB each, with their ROI
results), the 10,000-ROI index and per-thread buffers of the FUSE threads: measured at about
25 MiB. The bound is the size of the output, 64 MiB: a daemon that kept the chunks it served,
or the ROI results, grows past it, while 2.5 times the measured peak leaves room for other
allocators and kernels. Under AddressSanitizer (tests/run.sh with ROIFS_SANITIZE=1) the
daemon's quarantine of freed memory is cut to 16 MiB and the bound tripled for shadow memory
and redzones (measured: about 80 MiB)."""
import hashlib
import itertools
import json
import os
import random
import subprocess
import time

import numpy as np
import pytest

from conftest import PY, make_task, random_boxes

SHAPE, IN_CHUNKS, OUT_CHUNKS = (4096, 4096), (512, 512), (256, 256)
NROIS, NREADERS = 10_000, 16
MIB = 1 << 20
RSS_BOUND = 64 * MIB  # the output's size

READER = r"""
import hashlib, json, os, sys, time
import zarr
mnt, order_file, go, out = sys.argv[1:5]
order = json.load(open(order_file))
z = zarr.open(mnt, mode="r")
ch = z.chunks
while not os.path.exists(go):
    time.sleep(0.01)
digests = {}
for idx in order:
    sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, ch))
    digests[".".join(map(str, idx))] = hashlib.sha1(z[sl].tobytes()).hexdigest()
json.dump(digests, open(out, "w"))
"""


def random_rois(rng):
    """Boxes of 16..160 elements per side anywhere in the array: they overlap one another,
    straddle chunk boundaries and leave some chunks' parts (and a few chunks) uncovered."""
    return random_boxes(rng, NROIS, SHAPE, 16, 160)


def chunk_orders(grid):
    """16 different orders of the chunk indices: C order, reversed, column by column, and
    13 shuffles."""
    base = list(itertools.product(*[range(g) for g in grid]))
    orders = [base, base[::-1], sorted(base, key=lambda i: (i[1], i[0]))]
    for seed in range(NREADERS - len(orders)):
        o = list(base)
        random.Random(seed).shuffle(o)
        orders.append(o)
    return orders


def vm_hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def sanitized(binary):
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


@pytest.mark.timeout(600)
def test_sixteen_readers_ten_thousand_rois(tmp_path, mount, roifs_bin, monkeypatch):
    asan = sanitized(roifs_bin)
    if asan:  # ASan's quarantine of freed memory (256 MiB by default) would count as RSS
        monkeypatch.setenv("ASAN_OPTIONS",
                           os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=16")
    rng = random.Random(42)
    inp = np.random.default_rng(7).integers(0, 256, SHAPE, dtype=np.uint8)
    rois = random_rois(rng)
    task = make_task(tmp_path, inp, IN_CHUNKS, rois=rois,
                     process={"builtin": "add", "param.value": 1, "threads": 0},
                     output={"dtype": "<u4", "chunks": ",".join(map(str, OUT_CHUNKS)),
                             "compressor": "blosc"})
    ref = np.zeros(SHAPE, "<u4")
    for roi in rois:  # the builtin is pointwise, so every covering ROI gives the same value
        s = tuple(slice(a, b) for a, b in roi)
        ref[s] = inp[s].astype("<u4") + 1
    grid = [-(-s // c) for s, c in zip(SHAPE, OUT_CHUNKS)]
    want = {}
    for idx in itertools.product(*[range(g) for g in grid]):
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, OUT_CHUNKS))
        want[".".join(map(str, idx))] = hashlib.sha1(ref[sl].tobytes()).hexdigest()
    del ref

    script = tmp_path / "reader.py"
    script.write_text(READER)
    go = tmp_path / "go"
    with mount(task.config) as m:
        procs = []
        for i, order in enumerate(chunk_orders(grid)):
            of = tmp_path / f"order{i}.json"
            of.write_text(json.dumps(order))
            log = open(tmp_path / f"reader{i}.log", "wb")
            procs.append((subprocess.Popen([PY, str(script), str(m.path), str(of), str(go),
                                            str(tmp_path / f"digests{i}.json")],
                                           stdout=log, stderr=subprocess.STDOUT), log))
        start = time.monotonic()
        go.touch()
        deadline = start + 420
        failed = {}
        try:
            for i, (p, log) in enumerate(procs):
                try:
                    rc = p.wait(timeout=max(1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    failed[i] = f"still reading after {deadline - start:.0f} s (deadlock?)"
                    continue
                if rc != 0:
                    failed[i] = f"exit {rc}: " + (tmp_path / f"reader{i}.log").read_text()[-1500:]
        finally:
            for p, log in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                log.close()
        elapsed = time.monotonic() - start
        assert not failed, f"readers failed: {failed}\nstatus: {m.status()}"

        for i in range(NREADERS):
            got = json.loads((tmp_path / f"digests{i}.json").read_text())
            bad = sorted(k for k in want if got.get(k) != want[k])
            assert not bad and len(got) == len(want), f"reader {i}: wrong chunks {bad[:10]}"

        st = m.status()
        assert st["calls"] == NROIS, st
        assert st["rois"] == {**st["rois"], "total": NROIS, "done": NROIS, "failed": 0,
                              "pending": 0, "running": 0}, st["rois"]
        assert st["errors"] == [], st["errors"]
        assert m.alive()
        hwm = vm_hwm(m.proc.pid)
        bound = RSS_BOUND * (3 if asan else 1)
        print(f"\n{NREADERS} readers x {len(want)} chunks in {elapsed:.1f} s; "
              f"daemon VmHWM {hwm / MIB:.1f} MiB (bound {bound / MIB:.0f} MiB)")
        assert hwm < bound, f"daemon VmHWM {hwm / MIB:.1f} MiB exceeds {bound / MIB:.0f} MiB"
