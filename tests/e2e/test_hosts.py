"""Several hosts, one cache (issue 35; docs/operations.md, "Several hosts, one cache"):
simulated hosts (tests/e2e/hosts.py: each its own mount, pid, UTS and IPC namespaces, the
cache seen through its own bindfs mirror, whose byte-range locks do not reach the other's)
run `roifs warm` at once on one cache directory:
- the mirrors behave as node-local locks do: a lock taken through one is not seen through
  the other, while an exclusive create is;
- two hosts, two warms each, over repeated rounds (every round a new param, so every ROI
  is computed again): every ROI runs exactly once per round in all (calls == ROIs), every
  warm exits 0, no record or chunk is ever found damaged or dropped, and the array read
  afterwards is exact;
- a holder killed (its whole host) in the middle of a ROI: another host's warm does not
  take the ROI while the holder lives and renews its claim, and takes it over within the
  lease plus 5 seconds of the kill.
"""
import contextlib
import fcntl
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import make_task, mounted, random_boxes
from hosts import CTO, Host, run_hosts
from mounting import is_mounted, lazy_unmount

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or subprocess.run(["which", "bindfs"], capture_output=True).returncode,
    reason="simulated hosts need root (namespaces, mounts) and bindfs")

SHAPE, CHUNKS = (256, 256), (32, 32)
NROIS = 64

PROCESSOR = r"""
import os, time
import numpy as np


def f(block, roi):
    fd = os.open(roi.params["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    who = os.environ.get("HOST_NAME", "?")
    os.write(fd, f"start {roi.index} {who}\n".encode())
    os.close(fd)
    if who == roi.params.get("slow_host") and roi.index == int(roi.params.get("slow_roi", -1)):
        time.sleep(120)
    if who == roi.params.get("long_host"):  # its first ROI runs long_s seconds (a flag file)
        try:
            os.close(os.open(roi.params["long_flag"], os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            os.write(os.open(roi.params["log"], os.O_WRONLY | os.O_APPEND),
                     f"long {roi.index} {who}\n".encode())
            time.sleep(float(roi.params["long_s"]))
        except FileExistsError:
            pass
    time.sleep(float(roi.params.get(f"sleep_{who}", roi.params["sleep"])))
    return block.astype(np.uint32) + np.uint32((roi.index + 1) * int(roi.params["round"]))
"""


@contextlib.contextmanager
def mirror(real, view):
    """A bindfs mirror of real at view (in this namespace), unmounted afterwards."""
    Path(view).mkdir(parents=True, exist_ok=True)
    subprocess.run(["bindfs", "--no-allow-other", "-o", CTO, str(real), str(view)], check=True,
                   timeout=20)
    try:
        yield Path(view)
    finally:
        subprocess.run(["fusermount3", "-u", str(view)], capture_output=True, timeout=30)
        if is_mounted(view):
            lazy_unmount(view)


LEASE = 5  # [cache] lease in these tests: the least there is


def hosts_task(tmp_path, rnd, sleep, view=None, **params):
    """The task of these tests; its [cache] dir is view (default tmp_path/view, where each
    host mounts its mirror), the directory itself is tmp_path/cache."""
    rng = __import__("random").Random(35)
    rois = random_boxes(rng, NROIS, SHAPE, 8, 48)
    inp = np.arange(np.prod(SHAPE), dtype=np.uint32).reshape(SHAPE) % 1000
    (tmp_path / "proc.py").write_text(PROCESSOR)
    real = tmp_path / "cache"
    real.mkdir(mode=0o700, exist_ok=True)
    task = make_task(tmp_path, inp, CHUNKS, rois=rois,
                     process={"python": "proc.py:f", "threads": 2,
                              "param.log": tmp_path / "calls.log", "param.sleep": sleep,
                              "param.round": rnd,
                              **{f"param.{k}": v for k, v in params.items()}},
                     output={"dtype": "<u4", "chunks": ",".join(map(str, CHUNKS))},
                     sections={"cache": {"dir": view or tmp_path / "view", "lease": LEASE}})
    return task, rois, inp, real


def reference(inp, rois, rnd):
    ref = np.zeros(SHAPE, "<u4")
    for r, roi in enumerate(rois):
        s = tuple(slice(a, b) for a, b in roi)
        ref[s] = inp[s] + (r + 1) * rnd
    return ref


def calls(log):
    if not log.exists():
        return []
    return [l.split() for l in log.read_text().splitlines() if l.startswith("start ")]


DAMAGE = re.compile(r"damaged|incomplete record|fails its checksum|does not verify|"
                    r"cannot register|not a roifs cache", re.I)


def test_mirror_locks_stay_local_exclusive_create_does_not(tmp_path):
    real = tmp_path / "d"
    real.mkdir(mode=0o700)
    with mirror(real, tmp_path / "m1") as m1, mirror(real, tmp_path / "m2") as m2:
        holder = subprocess.Popen(
            ["/usr/bin/python3", "-c",
             "import fcntl, sys, time\n"
             "f = open(sys.argv[1], 'a+')\n"
             "fcntl.lockf(f, fcntl.LOCK_EX)\n"
             "print('locked', flush=True)\n"
             "time.sleep(30)\n", str(m1 / "lockfile")],
            stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "locked"
            # Through the same mirror the lock is seen...
            with open(m1 / "lockfile", "a+") as f, pytest.raises(OSError):
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # ... through the other it is not: a node-local lock.
            with open(m2 / "lockfile", "a+") as f:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.lockf(f, fcntl.LOCK_UN)
        finally:
            holder.kill()
            holder.wait(10)
        # An exclusive create reaches the directory itself.
        os.close(os.open(m1 / "claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        with pytest.raises(FileExistsError):
            os.open(m2 / "claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)


def check_array(roifs_bin, task, real, ref):
    """Reads the whole array through a mount of the cache (a mirror at the view) and compares."""
    with mirror(real, task.dir / "view"), mounted(roifs_bin, task.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
        log = m.log_text()
    assert not DAMAGE.search(log), log
    assert np.array_equal(got, ref)


@pytest.mark.timeout(240)
def test_two_hosts_two_warms_each_compute_every_roi_once(tmp_path, roifs_bin):
    rounds, per_host = 3, 2
    for rnd in range(1, rounds + 1):
        task, rois, inp, real = hosts_task(tmp_path, rnd, 0.02)
        log = tmp_path / "calls.log"
        log.unlink(missing_ok=True)
        out = tmp_path / f"round{rnd}"
        hosts = [Host(name, real, tmp_path / "view", out,
                      [[roifs_bin, "warm", "-j", "2", str(task.config)]] * per_host)
                 for name in ("a", "b")]
        rcs = run_hosts(hosts, timeout=120)
        logs = "\n".join(h.log(i) for h in hosts for i in range(per_host))
        assert rcs == {"a": [0] * per_host, "b": [0] * per_host}, logs
        assert not DAMAGE.search(logs), logs
        n = Counter(int(c[1]) for c in calls(log))
        assert sorted(n) == list(range(NROIS)), (sorted(n), logs)
        twice = {r: k for r, k in n.items() if k > 1}
        assert not twice, f"round {rnd}: {sum(n.values())} calls for {NROIS} ROIs: {twice}"
        check_array(roifs_bin, task, real, reference(inp, rois, rnd))


def wait_for_call(log, roi, host, timeout):
    """Seconds until `start ROI HOST` is in the calls log, or None after timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if [str(roi), host] in [c[1:] for c in calls(log)]:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


@pytest.mark.timeout(180)
def test_killed_holder_is_taken_over_within_the_lease(tmp_path, roifs_bin):
    slow = 0  # host a's ROI 0 never ends: a holder that hangs in it until its host is killed
    task, rois, inp, real = hosts_task(tmp_path, 1, 0.01, slow_host="a", slow_roi=slow)
    log = tmp_path / "calls.log"
    warm = [roifs_bin, "warm", "-j", "2", str(task.config)]
    a = Host("a", real, tmp_path / "view", tmp_path / "out", [warm]).start()
    b = Host("b", real, tmp_path / "view", tmp_path / "out", [warm])
    try:
        assert wait_for_call(log, slow, "a", 60) is not None, a.log(0)
        b.start()
        # a lives and renews its claim: b never takes its ROI, over more than a lease
        assert wait_for_call(log, slow, "b", 1.5 * LEASE) is None, b.log(0)
        a.kill()
        took = wait_for_call(log, slow, "b", LEASE + 5 + 5)
        assert took is not None and took <= LEASE + 5, (took, b.log(0))
        assert b.wait(120) == [0], b.log(0)
    finally:
        a.kill()
        b.kill()
    assert not DAMAGE.search(b.log(0)), b.log(0)
    n = Counter((int(c[1]), c[2]) for c in calls(log))
    assert {r for r, _ in n} == set(range(NROIS))
    assert all(k == 1 for k in n.values()), n  # once per host at most
    check_array(roifs_bin, task, real, reference(inp, rois, 1))
