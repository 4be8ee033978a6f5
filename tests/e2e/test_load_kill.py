"""Load with a crash (issue 14.9): 64 reader threads in 4 processes read two mounts of one
configuration while `roifs warm` fills the same cache, over 10,000 overlapping ROIs of which
one always fails; one mount's daemon is SIGKILLed in the middle and lazily unmounted, its
readers going on through the other mount.

Afterwards, with every processor call logged by the processor itself (before it computes:
the ROI, and A, B or W for the mount, the killed mount and warm), it asserts:
- every read is right: each chunk read equals the numpy reference (the processor's result
  depends on the ROI, so a result pasted in the wrong place or order shows), and each chunk
  the failing ROI touches fails with EIO in every reader, in warm (named in its messages and
  exit status 1) and in a remount; the surviving mount's status file names the ROI;
- exactly once: no ROI but the failing one ran twice in one process, nor twice in all of
  the processes that were not killed; a ROI ran at most twice in all (once more per kill),
  the second time only when the killed daemon had run it (it was in flight at the kill: its
  result not yet stored); of ROIs that span chunks (computed and stored at once under their
  own lock) at most `threads` were run again, those the killed daemon's compute threads held;
  every ROI ran at least once, and a remount afterwards runs none but the failing one (all
  work finished is kept);
- nothing is left running: no process with the test's mark in its environment (daemons,
  warm, interpreters, readers) and no mount.
"""
import contextlib
import errno
import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import time
import uuid
from collections import Counter

import numcodecs
import numpy as np
import pytest

from conftest import (PY, chunk_key, chunks_touched, fuse_mounts, in_session, is_mounted,
                      kill_group, lazy_unmount, make_task, mounted, pid_alive, random_boxes,
                      watched)

SHAPE, IN_CHUNKS, OUT_CHUNKS = (2048, 2048), (256, 256), (128, 128)
NROIS = 10_000
NPROCS, NTHREADS = 4, 16  # 64 reader threads: processes 0 and 1 on mount A, 2 and 3 on B
THREADS = 4  # compute threads of each roifs process
FAIL = 50  # the failing ROI
SLOW, SLOW_EVERY = 0.03, 20  # every 20th ROI takes 30 ms
KILL_AT_TOTAL, KILL_AT_B = 3000, 300  # processor calls logged before the kill

# The processor: logs each call, fails ROI param.fail, else in + (index + 1) * 256.
PROCESSOR = r"""
import os
import time
import numpy as np

_log = None


def f(block, roi):
    global _log
    if _log is None:  # opened at the first call: the server forks its workers after import
        _log = os.open(roi.params["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_log, f"{roi.index} {os.environ.get('LOAD_WHO', '?')}\n".encode())
    if roi.index % int(roi.params["slow_every"]) == 0:
        time.sleep(float(roi.params["slow"]))
    if roi.index == int(roi.params["fail"]):
        raise RuntimeError(f"roi {roi.index} fails on purpose")
    return block.astype(np.uint32) + np.uint32((roi.index + 1) << 8)
"""

# A reader process: NTHREADS threads, each opening every chunk once in its own order from
# its mount; a read of mount B that fails once the kill flag exists goes to mount A instead.
READER = r"""
import errno, hashlib, json, os, sys, threading, time
import numcodecs
spec = json.load(open(sys.argv[1]))
blosc = numcodecs.Blosc()
while not os.path.exists(spec["go"]):
    time.sleep(0.01)
results = [None] * len(spec["orders"])

def read(mnt, key):
    with open(os.path.join(mnt, key), "rb") as f:
        return f.read()

def thread(i):
    mine, out, moved = spec["mount"], {}, None
    for key in spec["orders"][i]:
        try:
            data, where = read(spec["mounts"][mine], key), mine
        except OSError as e:
            if mine == "B" and os.path.exists(spec["killed"]):
                moved, mine = key, "A"
                try:
                    data, where = read(spec["mounts"]["A"], key), "A"
                except OSError as e2:
                    out[key] = ["error", e2.errno, "A"]
                    continue
            else:
                out[key] = ["error", e.errno, mine]
                continue
        out[key] = ["ok", hashlib.sha1(blosc.decode(data)).hexdigest(), where]
    results[i] = {"chunks": out, "moved_at": moved}

ts = [threading.Thread(target=thread, args=(i,)) for i in range(len(spec["orders"]))]
for t in ts:
    t.start()
for t in ts:
    t.join()
json.dump(results, open(spec["out"], "w"))
"""


def random_rois(rng):
    """Boxes of 8..72 elements per side: about 67 per chunk, half of them spanning chunks."""
    return random_boxes(rng, NROIS, SHAPE, 8, 72)


def reference(inp, rois, fail):
    """The expected array (later ROIs win) and the chunks the failing ROI touches."""
    ref = np.zeros(SHAPE, "<u4")
    for r, roi in enumerate(rois):
        s = tuple(slice(a, b) for a, b in roi)
        ref[s] = inp[s].astype("<u4") + ((r + 1) << 8)
    want = {}
    for idx in itertools.product(*[range(s // c) for s, c in zip(SHAPE, OUT_CHUNKS)]):
        sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, OUT_CHUNKS))
        want[chunk_key(idx)] = hashlib.sha1(ref[sl].tobytes()).hexdigest()
    failing = {chunk_key(i) for i in chunks_touched([rois[fail]], SHAPE, OUT_CHUNKS)}
    return want, failing


def chunk_orders(p):
    """The orders of reader process p's threads. Processes 0 (mount A) and 2 (mount B): C
    order, thread t from chunk 16 t on, so that the two mounts make neighbouring chunks at
    the same time (as warm does from chunk 0) and ask for the ROIs those share at once.
    Processes 1 and 3: reversed, column by column, and shuffles."""
    base = [chunk_key(i) for i in
            itertools.product(*[range(s // c) for s, c in zip(SHAPE, OUT_CHUNKS)])]
    step = len(base) // NTHREADS
    if p % 2 == 0:
        return [base[t * step:] + base[:t * step] for t in range(NTHREADS)]
    orders = [base[::-1], sorted(base, key=lambda k: k.split(".")[::-1])]
    for t in range(len(orders), NTHREADS):
        o = list(base)
        random.Random(p * NTHREADS + t).shuffle(o)
        orders.append(o)
    return orders


def n_chunks(roi):
    return len(chunks_touched([roi], SHAPE, OUT_CHUNKS))


def read_log(path):
    """[(roi, who)] in the order the calls were logged."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        r, who = line.split()
        out.append((int(r), who))
    return out


def marked_processes(token):
    """Live processes (not zombies) whose environment carries token."""
    mark = f"LOAD_TOKEN={token}".encode()
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if mark in env and pid_alive(int(p)):
            found.append(int(p))
    return found


@contextlib.contextmanager
def killable_mount(roifs_bin, config, mnt, env, log):
    """roifs mount -f in the background, for a test that kills it; never leaves it behind."""
    mnt.mkdir(exist_ok=True)
    with open(log, "wb") as logf:
        proc = subprocess.Popen([roifs_bin, "mount", "-f", str(config), str(mnt)],
                                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd="/", start_new_session=True, env=env)
    with watched(proc, mnt):
        try:
            deadline = time.monotonic() + 30
            while not (is_mounted(mnt) and os.path.exists(mnt / ".zarray")):
                assert proc.poll() is None, f"mount B exited with {proc.returncode}: " + \
                    log.read_text()[-2000:]
                assert time.monotonic() < deadline, "mount B not ready after 30 s"
                time.sleep(0.05)
            yield proc
        finally:
            kill_group(proc)
            if is_mounted(mnt):
                lazy_unmount(mnt)


def wait_for_kill_point(log, b_proc, deadline):
    """Polls the processor log until KILL_AT_TOTAL calls, KILL_AT_B of them by mount B."""
    while True:
        calls = read_log(log)
        by_b = sum(1 for _, who in calls if who == "B")
        if len(calls) >= KILL_AT_TOTAL and by_b >= KILL_AT_B:
            return len(calls), by_b
        assert len(calls) < NROIS - 1000, \
            f"test bug: {len(calls)} calls, {by_b} by B, before the kill point"
        assert b_proc.poll() is None, f"mount B exited with {b_proc.returncode}"
        assert time.monotonic() < deadline, f"kill point not reached: {len(calls)} calls"
        time.sleep(0.02)


@pytest.mark.timeout(300)
def test_readers_two_mounts_and_warm_with_a_kill(tmp_path, roifs_bin):
    rng = random.Random(14_9)
    inp = np.random.default_rng(9).integers(0, 256, SHAPE, dtype=np.uint8)
    rois = random_rois(rng)
    # The failing ROI spans the four chunks where warm and the first readers of both mounts
    # start, and comes early in the list: it is asked for (and fails) before most of its
    # chunks' other ROIs, which still run when the other processes come for the chunks.
    fail = FAIL
    rois[fail] = ((96, 160), (96, 160))
    shared = {r for r in range(NROIS) if n_chunks(rois[r]) >= 2}
    calls_log = tmp_path / "calls.log"
    (tmp_path / "proc.py").write_text(PROCESSOR)
    task = make_task(tmp_path, inp, IN_CHUNKS, rois=rois,
                     process={"python": "proc.py:f", "threads": THREADS,
                              "param.log": calls_log, "param.fail": fail,
                              "param.slow": SLOW, "param.slow_every": SLOW_EVERY},
                     output={"dtype": "<u4", "chunks": ",".join(map(str, OUT_CHUNKS)),
                             "compressor": "blosc"})
    want, failing = reference(inp, rois, fail)
    assert 2 <= len(failing) < len(want)

    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOAD_")}
    env["LOAD_TOKEN"] = token
    envs = {who: {**env, "LOAD_WHO": who} for who in "ABWC"}
    mnt_a, mnt_b = tmp_path / "mntA", tmp_path / "mntB"
    go, killed = tmp_path / "go", tmp_path / "killed"
    keys = sorted(want)

    with contextlib.ExitStack() as stack:
        a = stack.enter_context(mounted(roifs_bin, task.config, mnt=mnt_a, env=envs["A"]))
        b = stack.enter_context(killable_mount(roifs_bin, task.config, mnt_b, envs["B"],
                                               tmp_path / "roifs-B.log"))
        readers = []
        for p in range(NPROCS):
            orders = chunk_orders(p)
            spec = tmp_path / f"reader{p}.json"
            spec.write_text(json.dumps({
                "mounts": {"A": str(mnt_a), "B": str(mnt_b)}, "mount": "AB"[p // 2],
                "orders": orders, "go": str(go), "killed": str(killed),
                "out": str(tmp_path / f"got{p}.json")}))
            readers.append(stack.enter_context(in_session(
                [PY, "-c", READER, str(spec)], env=env, log=tmp_path / f"reader{p}.log")))
        start = time.monotonic()
        go.touch()
        warm = stack.enter_context(in_session([roifs_bin, "warm", str(task.config)],
                                              env=envs["W"], log=tmp_path / "warm.log"))
        at_kill = wait_for_kill_point(calls_log, b, start + 120)
        killed.touch()  # before the kill: a reader that sees B fail knows why
        before_kill = len(read_log(calls_log))  # calls logged before the kill, at least
        os.kill(b.pid, signal.SIGKILL)  # the daemon only: its processors must die with it
        b.wait(timeout=10)
        lazy_unmount(mnt_b)
        killed_after = time.monotonic() - start

        for p, proc in enumerate(readers):
            try:
                rc = proc.wait(timeout=max(1.0, start + 200 - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"reader {p} still reading after 200 s (deadlock?); "
                                     f"status of A: {a.status()}")
            assert rc == 0, f"reader {p} exit {rc}: " + \
                (tmp_path / f"reader{p}.log").read_text()[-2000:]
        try:
            warm_rc = warm.wait(timeout=max(1.0, start + 200 - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError("warm still running after 200 s")
        readers_done = time.monotonic() - start
        warm_log = (tmp_path / "warm.log").read_text()
        status_a = a.status()

    # ---- every read is right
    moved = 0
    for p in range(NPROCS):
        for t, res in enumerate(json.loads((tmp_path / f"got{p}.json").read_text())):
            got = res["chunks"]
            assert sorted(got) == keys, f"reader {p}.{t} did not read every chunk"
            moved += res["moved_at"] is not None
            for k in keys:
                if k in failing:
                    assert got[k][:2] == ["error", errno.EIO], f"reader {p}.{t}, {k}: {got[k]}"
                else:
                    assert got[k] == ["ok", want[k], got[k][2]], \
                        f"reader {p}.{t}, chunk {k}: {got[k]} (from mount {got[k][2]})"
    assert warm_rc == 1, f"warm exit {warm_rc}:\n{warm_log[-3000:]}"
    assert f"roi {fail} [" in warm_log and "fails on purpose" in warm_log, warm_log[-3000:]
    assert any(e["roi"] == fail and "fails on purpose" in e["message"]
               for e in status_a["errors"]), status_a["errors"]
    assert {e["roi"] for e in status_a["errors"]} == {fail}, status_a["errors"]

    # ---- exactly once, with one kill
    calls = read_log(calls_log)
    assert all(who in "ABW" for _, who in calls), Counter(who for _, who in calls)
    per = {who: Counter(r for r, w in calls if w == who) for who in "ABW"}
    survivors = per["A"] + per["W"]
    total = per["B"] + survivors
    for who, c in per.items():
        twice = sorted(r for r, n in c.items() if n > 1 and r != fail)
        assert not twice, f"{who} ran ROIs more than once: {twice[:20]} ({len(twice)})"
    twice = sorted(r for r, n in survivors.items() if n > 1 and r != fail)
    assert not twice, f"the mount and warm that survived both ran {len(twice)} ROIs: " \
        f"{twice[:20]} ({sum(r in shared for r in twice)} spanning chunks)"
    never = sorted(set(range(NROIS)) - set(total))
    assert not never, f"ROIs never run: {never[:20]} ({len(never)})"
    again = sorted(r for r, n in total.items() if n > 1 and r != fail)
    assert all(total[r] == 2 and per["B"][r] == 1 for r in again), "more than once per kill"
    early = [r for r in again if any(r == r2 and w != "B" for r2, w in calls[:before_kill])]
    assert not early, f"ROIs run by mount B and by a survivor before the kill: {early[:20]}"
    again_shared = [r for r in again if r in shared]
    assert len(again_shared) <= THREADS, \
        f"{len(again_shared)} ROIs spanning chunks ran again after the kill: {again_shared}"

    # ---- a remount runs nothing but the failing ROI, and serves the same
    with mounted(roifs_bin, task.config, mnt=tmp_path / "mntC", env=envs["C"]) as c:
        for k in keys:
            try:
                with open(c.path / k, "rb") as f:
                    data = f.read()
            except OSError as e:
                assert k in failing and e.errno == errno.EIO, f"remount, chunk {k}: {e}"
                continue
            assert k not in failing, f"remount served chunk {k} of the failing ROI"
            assert hashlib.sha1(numcodecs.Blosc().decode(data)).hexdigest() == want[k], k
        status_c = c.status()
    rerun = [(r, w) for r, w in read_log(calls_log)[len(calls):]]
    assert rerun and all(r == fail and w == "C" for r, w in rerun), rerun[:20]
    assert status_c["calls"] == len(rerun), status_c

    # ---- nothing left running
    deadline = time.monotonic() + 10
    while (left := marked_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:  # never leave them behind for the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the test still running: " + \
        "; ".join(open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(
            errors="replace") for p in left if os.path.exists(f"/proc/{p}"))
    base = os.path.realpath(tmp_path)
    assert not [m for m in fuse_mounts() if m.startswith(base + "/")]

    print(f"\n{NPROCS * NTHREADS} readers x {len(keys)} chunks, kill of B at {killed_after:.1f} s "
          f"({at_kill[0]} calls, {at_kill[1]} by B), readers and warm done at "
          f"{readers_done:.1f} s; calls A {sum(per['A'].values())}, B {sum(per['B'].values())}, "
          f"warm {sum(per['W'].values())}; run again after the kill: {len(again)} "
          f"({len(again_shared)} spanning chunks); {moved} readers moved from B to A; "
          f"the failing ROI ran {total[fail]} + {len(rerun)} times")
