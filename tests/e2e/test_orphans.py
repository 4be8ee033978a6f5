"""Processors die with roifs (issue 14.2): after kill -9 of a mount's daemon, of `roifs warm`
or of `roifs export`, no command process, worker, nor anything they started in their process
group, goes on running."""
import contextlib
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import PY, in_session, is_mounted, lazy_unmount, make_task, pid_alive

# Each records its pid and that of a child in its process group, then blocks for minutes.
COMMAND = "echo $$ >> {pids}; sleep 300 & echo $! >> {pids}; cat >/dev/null; wait"
WORKER = """\
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n{child.pid}\\n")
sys.stdin.readline()  # the first request: never answered
time.sleep(300)
"""


def wait_for_pids(path, n, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(p) for p in path.read_text().split()] if path.exists() else []
        if len(pids) >= n:
            return pids
        assert proc.poll() is None, f"roifs exited with {proc.returncode} before the processors ran"
        time.sleep(0.05)
    raise AssertionError(f"the processors did not start within {timeout} s")


def still_alive(pids, timeout=5):
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


def long_task(tmp_path, kind):
    pids = tmp_path / "pids.txt"
    if kind == "command":
        process = {"command": COMMAND.format(pids=pids)}
    else:
        (tmp_path / "w.py").write_text(WORKER)
        process = {"worker": f"exec {PY} w.py {pids}"}
    data = np.arange(64, dtype="<u2").reshape(8, 8)
    # two ROIs in two chunks, two threads: two processors run at once
    task = make_task(tmp_path, data, (4, 8), rois=[((0, 4), (0, 8)), ((4, 8), (0, 8))],
                     process={**process, "threads": 2, "readahead": 1})
    return task, pids


def kill_and_check(proc, pids):
    assert all(pid_alive(p) for p in pids), "test bug: a processor ended before the kill"
    os.kill(proc.pid, signal.SIGKILL)  # the process only, not its group
    proc.wait(timeout=10)
    left = still_alive(pids)
    for p in left:  # never leave them behind for the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert not left, f"processes still running 5 s after kill -9 of roifs: {left}"


@pytest.mark.parametrize("kind", ["command", "worker"])
def test_kill_9_of_the_daemon(tmp_path, roifs_bin, kind):
    task, pids = long_task(tmp_path, kind)
    task.mnt.mkdir()
    reader = None
    with in_session([roifs_bin, "mount", "-f", task.config, task.mnt], tmp_path) as proc:
        try:
            deadline = time.monotonic() + 20
            while not is_mounted(task.mnt):
                assert time.monotonic() < deadline and proc.poll() is None, "mount failed"
                time.sleep(0.02)
            reader = subprocess.Popen(["timeout", "60", "cat", str(task.mnt / "0.0")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            kill_and_check(proc, wait_for_pids(pids, 4, proc))
        finally:
            if is_mounted(task.mnt):
                lazy_unmount(task.mnt)
            if reader:
                reader.wait(timeout=60)


@pytest.mark.parametrize("kind", ["command", "worker"])
@pytest.mark.parametrize("how", ["warm", "export"])
def test_kill_9_of_warm_and_export(tmp_path, roifs_bin, how, kind):
    task, pids = long_task(tmp_path, kind)
    argv = [roifs_bin, how, task.config] + ([tmp_path / "out.zarr"] if how == "export" else [])
    with in_session(argv, tmp_path) as proc:
        kill_and_check(proc, wait_for_pids(pids, 4, proc))
