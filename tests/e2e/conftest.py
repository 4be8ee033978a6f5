"""Fixtures and helpers for the mounted end-to-end suite (docs/ is the contract).

Run with Debian's interpreter:  /usr/bin/python3 -m pytest tests/e2e -q
Every test runs under a watchdog (default 120 s, @pytest.mark.timeout(S) to change): when
it fires, all roifs daemons of the test are SIGKILLed and lazily unmounted, which unblocks
any read stuck in the kernel, and the test fails.
"""
import contextlib
import faulthandler
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import zarr

# Shared with bench/ (one copy of each); tests import them from here too.
from mounting import (fuse_mounts, is_mounted, lazy_unmount, mountinfo_entry,  # noqa: F401
                      pid_alive, read_status, roi_text, write_config)

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"
DEFAULT_TIMEOUT = 120

# ---------------------------------------------------------------- watchdog

_live = {}  # id -> (Popen, mountpoint) of daemons started by the running test
_live_lock = threading.Lock()


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): per-test watchdog limit")


class WatchdogTimeout(Exception):
    pass


@pytest.fixture(autouse=True)
def _watchdog(request):
    m = request.node.get_closest_marker("timeout")
    limit = m.args[0] if m else DEFAULT_TIMEOUT
    main = threading.main_thread().ident
    done, fired = threading.Event(), threading.Event()

    def on_alarm(signum, frame):
        raise WatchdogTimeout(f"test exceeded its {limit} s watchdog (daemons killed)")

    def watch():
        if done.wait(limit):
            return
        fired.set()
        sys.stderr.write(f"\n*** watchdog: {request.node.nodeid} exceeded {limit} s\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        with _live_lock:
            live = list(_live.values())
        for proc, mnt in live:
            with contextlib.suppress(Exception):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                lazy_unmount(mnt)
        signal.pthread_kill(main, signal.SIGALRM)

    prev = signal.signal(signal.SIGALRM, on_alarm)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()
        signal.signal(signal.SIGALRM, prev)
    if fired.is_set():
        pytest.fail(f"watchdog fired after {limit} s")


@pytest.fixture(scope="session", autouse=True)
def _no_mount_left_behind(tmp_path_factory):
    base = os.path.realpath(tmp_path_factory.getbasetemp())
    yield
    left = [m for m in fuse_mounts() if m == base or m.startswith(base + "/")]
    for m in left:
        lazy_unmount(m)
    assert not left, f"FUSE mounts left behind: {left}"


# ---------------------------------------------------------------- binary


@pytest.fixture(scope="session")
def roifs_bin():
    path = Path(os.environ.get("ROIFS_BIN", REPO / "build" / "roifs"))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"roifs binary not found at {path} "
                    "(build: meson setup build && ninja -C build, or set ROIFS_BIN)")
    return str(path)


def image_level_task(tmp_path, image, level, roi_line, output=None):
    """tmp_path/task.ini: builtin add over level `level` of the OME-Zarr image group `image`,
    one ROI (roi_line, in the level's axes) in tmp_path/rois.txt, cache tmp_path/cache."""
    (tmp_path / "rois.txt").write_text(roi_line + "\n")
    sections = {"input": {"path": image, "level": level}, "rois": {"file": "rois.txt"},
                "process": {"builtin": "add"}, "cache": {"dir": tmp_path / "cache"}}
    if output:
        sections["output"] = output
    write_config(tmp_path / "task.ini", sections)
    return tmp_path / "task.ini"


def run_on_terminal(argv, timeout):
    """Runs argv with its stderr on a pseudo-terminal (as a user at a terminal sees it);
    returns (exit status, what it wrote there, decoded)."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout), out.decode(errors="replace")


def run_roifs(roifs_bin, *args, timeout=20, cwd="/"):
    """Runs roifs ARGS; returns CompletedProcess with text stdout/stderr. Output goes
    through files, not pipes, so a stray background daemon cannot hold the call open."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        r = subprocess.run([roifs_bin, *map(str, args)], stdout=out, stderr=err,
                           timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)
        out.seek(0)
        err.seek(0)
        r.stdout = out.read().decode(errors="replace")
        r.stderr = err.read().decode(errors="replace")
    return r


# ---------------------------------------------------------------- tasks


def roi_slices(roi):
    return tuple(slice(a, b) for a, b in roi)


def line_of(path, pattern):
    """1-based number of the first line of path matching regex pattern."""
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if re.search(pattern, line):
            return n
    raise AssertionError(f"{pattern!r} not in {path}")


@dataclass
class Task:
    dir: Path
    config: Path
    input: Path
    rois_file: Path
    cache: Path
    mnt: Path
    inp: np.ndarray           # the input as zarr-python reads it (fill where chunks are missing)
    rois: list = field(default_factory=list)


def make_task(tmp_path, data, chunks, *, rois, process=None, output=None, compressor=None,
              order="C", dimension_separator=".", fill_value=0, attrs=None, regions=None,
              sections=None, extra="", roi_lines=None):
    """Writes in.zarr (zarr-python), rois.txt and task.ini under tmp_path.

    data: numpy array (its dtype is the input dtype). regions: slices tuples to write
    (None: everything) so that other input chunks do not exist. process/output: keys of
    [process]/[output]. sections: extra or overriding sections ({name: {key: value}};
    a key set to None is dropped). roi_lines: raw ROI file lines instead of rois."""
    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = np.asarray(data)
    inpath = tmp_path / "in.zarr"
    z = zarr.open(str(inpath), mode="w", shape=data.shape, chunks=chunks, dtype=data.dtype,
                  compressor=compressor, order=order, dimension_separator=dimension_separator,
                  fill_value=fill_value)
    if attrs:
        z.attrs.update(attrs)
    for region in ([tuple(slice(None) for _ in data.shape)] if regions is None else regions):
        z[region] = data[region]
    inp = zarr.open(str(inpath), mode="r")[...]

    rois_file = tmp_path / "rois.txt"
    if roi_lines is None:
        roi_lines = ["# generated by make_task"] + [roi_text(r, data.shape) for r in rois]
    rois_file.write_text("\n".join(roi_lines) + "\n")

    cache = tmp_path / "cache"
    secs = {"input": {"path": "in.zarr"},
            "rois": {"file": "rois.txt"},
            "process": dict(process or {"builtin": "copy"}),
            "output": dict(output or {}),
            "cache": {"dir": str(cache)}}
    for name, kv in (sections or {}).items():
        if kv is None:
            secs[name] = None
        else:
            secs.setdefault(name, {})
            secs[name] = {**(secs[name] or {}), **kv}
    config = tmp_path / "task.ini"
    write_config(config, secs, extra)
    return Task(tmp_path, config, inpath, rois_file, cache, tmp_path / "mnt", inp, list(rois))


def write_rois(task, rois):
    """Rewrites task's ROI file with rois, one per line."""
    task.rois_file.write_text("".join(roi_text(r) + "\n" for r in rois))


def set_option(task, key, value):
    """Rewrites task's configuration with every line that starts with key set to value."""
    text = task.config.read_text()
    task.config.write_text("\n".join(f"{key} = {value}" if l.startswith(key) else l
                                     for l in text.splitlines()) + "\n")


def random_boxes(rng, n, shape, lo, hi):
    """n boxes anywhere in shape, each side lo..hi elements (random.Random rng): for the load
    tests, which want ROIs that overlap and straddle chunks."""
    rois = []
    for _ in range(n):
        box = []
        for s in shape:
            side = rng.randint(lo, hi)
            a = rng.randrange(0, s - side)
            box.append((a, a + side))
        rois.append(tuple(box))
    return rois


def added_within(data, rois, value=1, fill=-1):
    """The output of an "add value" processor over rois of a 2-d <i4 input: data + value
    inside them (later ROIs win), fill elsewhere."""
    out = np.full(data.shape, fill, "<i4")
    for (y0, y1), (x0, x1) in rois:
        out[y0:y1, x0:x1] = data[y0:y1, x0:x1] + value
    return out


# ---------------------------------------------------------------- mounting


class Mount:
    def __init__(self, path, proc, log):
        self.path, self.proc, self.log = Path(path), proc, Path(log)

    def __truediv__(self, other):
        return self.path / other

    def status(self):
        return read_status(self.path)

    def log_text(self):
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def alive(self):
        return self.proc.poll() is None


_counter = itertools.count()


@contextlib.contextmanager
def watched(proc, mnt):
    """Puts a daemon (a Popen of its own session) serving mnt under the test's watchdog, for
    tests that start (and maybe kill) daemons themselves."""
    key = id(proc)
    with _live_lock:
        _live[key] = (proc, mnt)
    try:
        yield proc
    finally:
        with _live_lock:
            _live.pop(key, None)


def kill_group(proc):
    """Kills (SIGKILL) the process group of proc, a Popen of its own session, unless it has
    exited, and reaps it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@contextlib.contextmanager
def in_session(argv, cwd="/", env=None, log=None):
    """argv in a session of its own, its output to log (None: nowhere); killed with its group
    on leaving, for tests that start processes other than a mount."""
    with open(log or os.devnull, "wb") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True,
                                env=env)
    try:
        yield proc
    finally:
        kill_group(proc)


def all_at_once(*calls, timeout=60):
    """Runs each of calls (functions of no arguments) in a thread of its own, all at once,
    and waits (up to timeout seconds each) for them to end."""
    th = [threading.Thread(target=c) for c in calls]
    for x in th:
        x.start()
    for x in th:
        x.join(timeout)


def done_before_kill_9(roifs_bin, config, mnt, chunk, log, wait=1.0):
    """Mounts config at mnt (a new folder; output to log), reads chunk in the background and
    after wait seconds kills -9 the daemon: the ROIs it had done by then (its status)."""
    mnt.mkdir()
    p = subprocess.Popen([roifs_bin, "mount", "-f", str(config), str(mnt)],
                         stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(mnt / ".roifs" / "status"):
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.05)
        reader = subprocess.Popen(["cat", str(mnt / chunk)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        time.sleep(wait)
        done_before = read_status(mnt)["rois"]["done"]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)
        reader.kill()
        reader.wait(10)
    finally:
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
    return done_before


@contextlib.contextmanager
def mounted(roifs_bin, config, mnt=None, args=(), ready_timeout=30, env=None, checked=True):
    """roifs mount -f CONFIG MNT in the background (env: its environment, default ours);
    yields a Mount; unmounts and requires daemon exit status 0 (checked=False: the body may
    have unmounted or killed it itself, and checks what it expects). Never leaves a mount or a
    daemon behind."""
    config = Path(config)
    mnt = Path(mnt or config.parent / "mnt")
    mnt.mkdir(parents=True, exist_ok=True)
    log = config.parent / f"roifs-{next(_counter)}.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen([roifs_bin, "mount", "-f", *args, str(config), str(mnt)],
                                stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd="/", start_new_session=True,
                                env=env)
    key = id(proc)
    with _live_lock:
        _live[key] = (proc, mnt)
    m = Mount(mnt, proc, log)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if is_mounted(mnt):
                with contextlib.suppress(OSError):
                    os.stat(mnt)
                    break
            if proc.poll() is not None:
                pytest.fail(f"roifs mount exited with {proc.returncode} before the mount was "
                            f"ready; log:\n{m.log_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"mount not ready after {ready_timeout} s; log:\n{m.log_text()}")
            time.sleep(0.05)
        yield m
        if checked or is_mounted(mnt):
            r = subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, text=True,
                               timeout=30)
            assert not checked or r.returncode == 0, \
                f"fusermount3 -u failed: {r.stderr}\nlog:\n{m.log_text()}"
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"daemon still running 30 s after unmount; log:\n{m.log_text()}")
        assert not checked or rc == 0, f"daemon exit status {rc} after unmount; log:\n{m.log_text()}"
    except BaseException:
        sys.stderr.write(f"--- roifs log {log} (tail) ---\n{m.log_text()}\n")
        raise
    finally:
        if is_mounted(mnt):
            lazy_unmount(mnt)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        with _live_lock:
            _live.pop(key, None)


@pytest.fixture
def mount(roifs_bin):
    """mount(config, mnt=None, args=(), env=None) -> context manager yielding a Mount."""
    def _mount(config, mnt=None, args=(), ready_timeout=30, env=None):
        return mounted(roifs_bin, config, mnt, args, ready_timeout, env)
    return _mount


# ---------------------------------------------------------------- waiting and reading


def wait_for(cond, timeout=20, what="condition"):
    """Polls cond() every 20 ms; AssertionError naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def read_killing_busy(path, busy, timeout=20):
    """Reads path in a thread and SIGKILLs the processor pid that the file busy comes to hold
    (the processor writes it when it starts the ROI). Returns ({"data": bytes} or
    {"error": OSError}, the pid killed); the read must have ended by then."""
    got = {}

    def reader():
        try:
            got["data"] = read_bytes(path)
        except OSError as e:
            got["error"] = e

    t = threading.Thread(target=reader)
    t.start()
    deadline = time.monotonic() + timeout
    while not (busy.exists() and busy.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    victim = int(busy.read_text())
    os.kill(victim, signal.SIGKILL)
    t.join(timeout)
    assert not t.is_alive()
    return got, victim


@contextlib.contextmanager
def world_dir(prefix):
    """A directory under /tmp that any user can traverse (pytest's tmp_path is private to
    root), removed afterwards unless something is still mounted on its mnt."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        if not is_mounted(d / "mnt"):
            shutil.rmtree(d, ignore_errors=True)


def zarrita_node():
    """node, with tests/js (zarrita.js, from package-lock.json) installed when needed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail("node and npm are needed for the zarrita.js cross-checks")
    js = REPO / "tests" / "js"
    if not (js / "node_modules" / "zarrita").is_dir():
        r = subprocess.run([npm, "ci", "--prefix", str(js), "--no-audit", "--no-fund"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
    return node


def read_bytes(path):
    """Opens and reads a whole file; OSError propagates (errno tells why)."""
    with open(path, "rb") as f:
        return f.read()


def chunk_grid(shape, chunks):
    return [range(-(-s // c)) for s, c in zip(shape, chunks)]


def chunk_slices(idx, shape, chunks):
    return tuple(slice(i * c, min((i + 1) * c, s)) for i, s, c in zip(idx, shape, chunks))


def chunk_key(idx, sep="."):
    return sep.join(map(str, idx))


def all_chunks(shape, chunks):
    return list(itertools.product(*chunk_grid(shape, chunks)))


def chunks_touched(rois, shape, chunks):
    """Chunk indices that at least one ROI box intersects."""
    out = set()
    for roi in rois:
        ranges = [range(a // c, (b - 1) // c + 1) for (a, b), c in zip(roi, chunks)]
        out.update(itertools.product(*ranges))
    return out
