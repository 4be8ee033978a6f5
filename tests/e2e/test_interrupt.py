"""Interrupts and unmounts (README "Reliability"): a reader blocked opening a chunk whose ROI
takes 60 s ends at once on SIGINT or SIGKILL (FUSE_INTERRUPT answers its open with EINTR; the
computation goes on for the other readers); `roifs unmount` and SIGTERM of `mount -f` end the
daemon within seconds whatever runs (a 60 s command, an uninterruptible in-process plugin,
readers blocked in open, files held open): pending opens fail with EIO, the processors' process
groups are killed, the daemon exits 0; and `roifs unmount` exits 1, leaving the mount, when it
cannot end the daemon."""
import contextlib
import errno
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import conftest
from conftest import (PY, REPO, is_mounted, lazy_unmount, make_task, read_bytes, read_status,
                      wait_for)

SHAPE, CHUNKS = (64, 64), (32, 32)
ROIS = [((0, 32), (0, 32)), ((32, 64), (0, 64)), ((0, 32), (32, 64))]


def slow_task(tmp_path, seconds=60, threads=3, process=None, output=None):
    """ROI 0 (chunk 0.0) sleeps `seconds`; the others are quick. The sleep carries a token of
    its own, to find its processes in /proc."""
    token = f"0.00{random.randrange(10**6, 10**7)}"
    cmd = (f'if [ "$ROIFS_ROI" = 0 ]; then sleep {seconds} {token}; fi; cat')
    data = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    task = make_task(tmp_path, data, CHUNKS, rois=ROIS,
                     process=process or {"command": cmd, "threads": threads, "readahead": 0},
                     output=output or {"compressor": "zlib"})
    task.token = token
    task.data = data
    return task


def processes_with(token):
    """Pids of live processes whose command line holds token."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    with open(f"/proc/{pid}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                            out.append(int(pid))
        except OSError:
            pass
    return out


def state_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@contextlib.contextmanager
def daemon(roifs_bin, task, args=()):
    """roifs mount -f in the background, without the unmount of conftest.mounted (these tests
    end the daemon themselves); never leaves it or its mount behind."""
    task.mnt.mkdir(exist_ok=True)
    log = task.dir / "roifs.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen([roifs_bin, "mount", "-f", *args, str(task.config),
                                 str(task.mnt)], stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    with conftest._live_lock:
        conftest._live[id(proc)] = (proc, task.mnt)
    proc.log = log
    try:
        wait_for(lambda: is_mounted(task.mnt) or proc.poll() is not None, what="the mount")
        assert proc.poll() is None, log.read_text()
        os.stat(task.mnt)
        yield proc
    except BaseException:
        sys.stderr.write(f"--- roifs log ---\n{log.read_text(errors='replace')[-4000:]}\n")
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        if is_mounted(task.mnt):
            lazy_unmount(task.mnt)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in processes_with(task.token):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with conftest._live_lock:
            conftest._live.pop(id(proc), None)


def start_reader(path, code=None):
    """A process that opens and reads path; exit 0 when it read something, else 1."""
    code = code or ("import sys\ntry:\n    data = open(sys.argv[1], 'rb').read()\n"
                    "except OSError as e:\n    print(e.errno, flush=True); sys.exit(1)\n"
                    "sys.exit(0 if data else 3)\n")
    return subprocess.Popen([PY, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)


def wait_running(mnt, n=1):
    wait_for(lambda: read_status(mnt)["rois"]["running"] >= n, what="a running ROI")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_interrupted_open_ends_at_once(tmp_path, roifs_bin, sig):
    task = slow_task(tmp_path)
    with daemon(roifs_bin, task) as proc:
        reader = start_reader(task.mnt / "0.0")
        wait_running(task.mnt)
        time.sleep(0.2)  # the reader is waiting in its open
        assert reader.poll() is None and state_of(reader.pid) in ("S", "D"), state_of(reader.pid)
        t0 = time.monotonic()
        reader.send_signal(sig)
        try:
            reader.wait(3)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the reader did not end within 3 s of {sig.name}: "
                                 f"state {state_of(reader.pid)}")
        assert time.monotonic() - t0 < 3
        assert reader.returncode != 0
        # The mount keeps serving, and the ROI goes on computing (for the cache).
        assert read_bytes(task.mnt / "1.0")
        st = read_status(task.mnt)
        assert st["rois"]["running"] == 1, st
        wait_for(lambda: processes_with(task.token), what="the processor")
        assert proc.poll() is None


def test_interrupted_open_leaves_the_computation_to_others(tmp_path, roifs_bin, mount):
    """Reader A is interrupted; reader B, opening the same chunk meanwhile, gets it when the
    ROI ends; the ROI ran once."""
    task = slow_task(tmp_path, seconds=5)
    with mount(task.config) as m:
        a = start_reader(m / "0.0")
        wait_running(m.path)
        b = start_reader(m / "0.0")
        time.sleep(0.3)
        a.send_signal(signal.SIGINT)
        assert a.wait(1.5) != 0  # long before the ROI ends
        assert b.poll() is None
        assert b.wait(20) == 0
        assert m.status()["calls"] == 1
        data = read_bytes(m / "0.0")
        assert data and m.status()["calls"] == 1


def daemon_gone(proc, timeout):
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the daemon is still running {timeout} s later")


def stop_cases():
    return ["unmount", "sigterm"]


def stop(how, roifs_bin, task, proc):
    """Ends the mount: `roifs unmount MNT` (checked to succeed) or SIGTERM of `mount -f`."""
    if how == "unmount":
        r = conftest.run_roifs(roifs_bin, "unmount", task.mnt, timeout=30)
        assert r.returncode == 0, r.stderr
    else:
        proc.send_signal(signal.SIGTERM)


@pytest.mark.parametrize("how", stop_cases())
def test_stop_with_a_reader_blocked_in_open(tmp_path, roifs_bin, how):
    task = slow_task(tmp_path)
    with daemon(roifs_bin, task) as proc:
        reader = start_reader(task.mnt / "0.0")
        wait_running(task.mnt)
        wait_for(lambda: processes_with(task.token), what="the processor")
        t0 = time.monotonic()
        stop(how, roifs_bin, task, proc)
        assert daemon_gone(proc, 8) == 0, proc.log.read_text()
        assert time.monotonic() - t0 < 8
        assert reader.wait(3) == 1
        assert int(reader.stdout.read()) == errno.EIO
        assert not is_mounted(task.mnt)
        wait_for(lambda: not processes_with(task.token), timeout=3,
                 what="the processor to be killed")
        assert "answered with" in proc.log.read_text()


@pytest.mark.parametrize("how", stop_cases())
def test_stop_with_a_file_held_open(tmp_path, roifs_bin, how):
    """A reader holds a computed chunk open, another waits in an open, a ROI computes: the
    daemon ends all the same."""
    task = slow_task(tmp_path)
    with daemon(roifs_bin, task) as proc:
        held = os.open(task.mnt / "1.0", os.O_RDONLY)
        try:
            first = os.pread(held, 1 << 20, 0)
            assert first
            reader = start_reader(task.mnt / "0.0")
            wait_running(task.mnt)
            t0 = time.monotonic()
            stop(how, roifs_bin, task, proc)
            assert daemon_gone(proc, 8) == 0, proc.log.read_text()
            assert time.monotonic() - t0 < 8
            assert reader.wait(3) == 1
            assert not is_mounted(task.mnt)
            try:  # the held file may still read what the kernel has (passthrough, pages)
                assert os.pread(held, 1 << 20, 0) == first
            except OSError as e:
                assert e.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO), e
        finally:
            os.close(held)
        assert not processes_with(task.token)


SLOW_PLUGIN = r"""
#include <string.h>
#include <unistd.h>
#include <roifs/plugin.h>
static int slow(void *state, const struct roifs_roi *roi, const void *in, void *out,
                char *err, size_t errlen)
{
    (void)state; (void)err; (void)errlen;
    if (roi->index == 0)
        sleep(60); /* in the daemon's own thread: nothing can kill it */
    memcpy(out, in, roi->nelems * 2);
    return 0;
}
static const struct roifs_plugin plugin = {.abi = ROIFS_PLUGIN_ABI, .name = "slow",
                                           .process = slow};
const struct roifs_plugin *roifs_plugin(void) { return &plugin; }
"""


def test_unmount_while_a_plugin_computes(tmp_path, roifs_bin):
    """An in-process computation cannot be killed: the daemon answers, unmounts, and exits 0
    a few seconds later without it."""
    src, lib = tmp_path / "slow.c", tmp_path / "libslow.so"
    src.write_text(SLOW_PLUGIN)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-I{REPO / 'include'}", "-o", str(lib),
                    str(src)], check=True)
    task = slow_task(tmp_path, process={"plugin": str(lib), "threads": 2, "readahead": 0})
    with daemon(roifs_bin, task) as proc:
        reader = start_reader(task.mnt / "0.0")
        wait_running(task.mnt)
        t0 = time.monotonic()
        r = conftest.run_roifs(roifs_bin, "unmount", task.mnt, timeout=30)
        assert r.returncode == 0, r.stderr
        assert reader.wait(3) == 1  # answered at once
        assert daemon_gone(proc, 1) == 0
        assert time.monotonic() - t0 < 9
        assert not is_mounted(task.mnt)
        assert "exiting without them" in proc.log.read_text()


def test_unmount_fails_when_the_daemon_cannot_stop(tmp_path, roifs_bin):
    """A stopped (hung) daemon: `roifs unmount` says so and exits 1 instead of pretending."""
    task = slow_task(tmp_path)
    with daemon(roifs_bin, task) as proc:
        assert read_bytes(task.mnt / "1.0")
        os.kill(proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        r = conftest.run_roifs(roifs_bin, "unmount", task.mnt, timeout=30)
        assert r.returncode == 1, r
        assert f"its daemon (pid {proc.pid}) did not exit" in r.stderr, r.stderr
        assert 9 < time.monotonic() - t0 < 20
        assert is_mounted(task.mnt) and proc.poll() is None
        os.kill(proc.pid, signal.SIGCONT)  # the SIGTERM it was sent ends it now
        assert daemon_gone(proc, 8) == 0
        assert not is_mounted(task.mnt)


def test_unmount_of_a_busy_mount_without_its_daemon_refuses(tmp_path, roifs_bin):
    """No run file (removed here): a busy mount is not detached behind a daemon that would go
    on computing; exit 1. An idle one is unmounted."""
    task = slow_task(tmp_path)
    with daemon(roifs_bin, task) as proc:
        held = os.open(task.mnt / "1.0", os.O_RDONLY)
        runfile = Path("/run/roifs") / str(os.minor(os.stat(task.mnt).st_dev))
        assert runfile.read_text().split()[0] == str(proc.pid)
        runfile.unlink()
        try:
            r = conftest.run_roifs(roifs_bin, "unmount", task.mnt)
            assert r.returncode == 1 and "its daemon is not known" in r.stderr, r.stderr
            assert is_mounted(task.mnt) and proc.poll() is None
        finally:
            os.close(held)
        r = conftest.run_roifs(roifs_bin, "unmount", task.mnt)
        assert r.returncode == 0, r.stderr
        assert daemon_gone(proc, 8) == 0
