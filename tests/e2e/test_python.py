"""[process] python = FILE.py:FUNCTION (docs/processors.md#python-functions): the function
runs in workers forked by a fork server that imported the file when the mount (or check, warm,
export, apply) started. The seed
scenario, start-up errors (exit 2 with the Python error), per-ROI exceptions and wrong shapes
(that ROI fails, the mount serves on), the roi argument, the cast of results, workers killed
mid-ROI and replaced, timeouts, and no interpreter left after unmount or after kill -9."""
import errno
import json
import re
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import (PY, REPO, is_mounted, lazy_unmount, line_of, make_task, read_bytes,
                      read_killing_busy, run_roifs, wait_for)

PYTHONPATH = str(REPO / "python")


def interpreters(task_dir):
    """PIDs of roifs's interpreters (fork server and workers) running in task_dir (their
    working directory is the configuration's)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if b"roifs._server" not in (p / "cmdline").read_bytes():
                continue
            if os.readlink(p / "cwd") != str(task_dir) or state(p.name) == "Z":
                continue
        except OSError:
            continue
        out.append(int(p.name))
    return out


def state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return None


def wait_no_interpreters(task_dir, timeout=10):
    deadline = time.monotonic() + timeout
    while interpreters(task_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    return interpreters(task_dir)


def expect_eio(path):
    with pytest.raises(OSError) as e:
        read_bytes(path)
    assert e.value.errno == errno.EIO, f"expected EIO, got {e.value!r}"


def errors_of(m, roi):
    return [e["message"] for e in m.status()["errors"] if e.get("roi") == roi]


# ---------------------------------------------------------------- the seed scenario

SEED = """\
import os, time
import numpy as np

IMPORTED = time.time()

def add2(block, roi):
    start = time.time()
    time.sleep(1)
    with open(roi.params["counter"], "a") as f:
        f.write(f"{roi.index}\\n")
    if "spans" in roi.params:
        with open(roi.params["spans"], "a") as f:
            f.write(f"{IMPORTED} {start} {time.time()}\\n")
    return block + np.int64(2)
"""

ROI_SETS = {"singles": [((i, i + 1),) for i in range(4)],
            "pairs": [((i, i + 2),) for i in range(3)]}


def counter_lines(path):
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("rois", list(ROI_SETS))
@pytest.mark.parametrize("chunk", [1, 2, 4])
def test_seed(tmp_path, mount, chunk, rois):
    (tmp_path / "seed.py").write_text(SEED)
    counter = tmp_path / "counter"
    roi_list = ROI_SETS[rois]
    task = make_task(tmp_path, np.zeros(4, "<i8"), (chunk,), rois=roi_list,
                     process={"python": "seed.py:add2", "threads": 4,
                              "param.counter": str(counter),
                              "param.spans": str(tmp_path / "spans")})
    n = len(roi_list)
    expected = np.full(4, 2, "<i8")
    with mount(task.config) as m:
        t0 = time.time()
        got = zarr.open(str(m.path), mode="r")[:]
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.dtype("<i8")
        assert sorted(counter_lines(counter)) == [str(i) for i in range(n)], \
            "each ROI must run exactly once"
        assert m.status()["calls"] == n
        # The interpreters imported seed.py before the read began, and the ROIs ran in
        # parallel (every call's 1 s span overlaps every other's): facts that hold however
        # loaded the machine is, where a wall-time limit does not.
        spans = [tuple(map(float, l.split())) for l in
                 (tmp_path / "spans").read_text().splitlines()]
        assert len(spans) == n
        assert all(imported < t0 for imported, _, _ in spans), (spans, t0)
        assert max(s for _, s, _ in spans) < min(e for _, _, e in spans), spans
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], expected)
        assert len(counter_lines(counter)) == n, "a second read ran ROIs again"
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], expected)
        assert m.status()["calls"] == 0 and len(counter_lines(counter)) == n


# ---------------------------------------------------------------- start-up errors

START_ERRORS = {
    "syntax": ("def f(block, roi):\n    return block +\n", "f.py:f",
               "f.py: SyntaxError: invalid syntax (f.py, line 2)"),
    "import": ("import no_such_module_here\ndef f(block, roi):\n    return block\n", "f.py:f",
               "f.py: ModuleNotFoundError: No module named 'no_such_module_here'"),
    "raises": ("raise RuntimeError('not at import, please')\n", "f.py:f",
               "f.py: RuntimeError: not at import, please"),
    "missing": ("def g(block, roi):\n    return block\n", "f.py:f", "f.py has no function 'f'"),
    "arity": ("def f(block):\n    return block\n", "f.py:f",
              "f(block) cannot be called as f(block, roi) (it must take two arguments)"),
    "not_callable": ("f = 3\n", "f.py:f", "f.py: f is a int, not a function"),
    "no_file": (None, "nothere.py:f", "nothere.py: no such file"),
    "no_module": (None, "nothere_module:f", "nothere_module: ModuleNotFoundError: No module "
                                            "named 'nothere_module'"),
    "form": (None, "f.py", "expected FILE.py:FUNCTION or MODULE:FUNCTION, got 'f.py'"),
    "thread": ("import threading, time\n"
               "threading.Thread(target=time.sleep, args=(30,), daemon=True, "
               "name='sleeper').start()\n"
               "def f(block, roi):\n    return block\n", "f.py:f",
               "the interpreter runs 2 threads after importing f.py (sleeper); roifs forks"),
}


def error_task(tmp_path, source, spec, **process):
    if source is not None:
        (tmp_path / "f.py").write_text(source)
    return make_task(tmp_path, np.zeros(4, "<u2"), (2,), rois=[((0, 4),)],
                     process={"python": spec, "threads": 2, **process})


@pytest.mark.parametrize("case", list(START_ERRORS))
def test_start_errors(tmp_path, roifs_bin, case):
    source, spec, message = START_ERRORS[case]
    task = error_task(tmp_path, source, spec)
    r = run_roifs(roifs_bin, "check", task.config)
    line = line_of(task.config, r"^python =")
    want = f"roifs: {task.config}:{line}: [process] python: {message}"
    assert r.returncode == 2, r
    assert want in r.stderr, r.stderr
    assert not wait_no_interpreters(task.dir), "an interpreter outlived the failed check"


@pytest.mark.parametrize("command", ["mount", "mount -f", "warm", "export", "apply"])
def test_start_error_fails_every_command(tmp_path, roifs_bin, command):
    task = error_task(tmp_path, START_ERRORS["syntax"][0], "f.py:f")
    args = command.split()
    if args[0] == "mount":
        task.mnt.mkdir()
        args += [task.config, task.mnt]
    elif args[0] == "export":
        args += [task.config, tmp_path / "out.zarr"]
    else:
        args += [task.config]
    try:
        r = run_roifs(roifs_bin, *args, timeout=30)
    finally:
        if is_mounted(task.mnt):
            lazy_unmount(task.mnt)
    assert r.returncode == 2, r
    assert f"{task.config}:{line_of(task.config, '^python =')}: [process] python: f.py: " \
           f"SyntaxError: invalid syntax" in r.stderr, r.stderr
    assert not is_mounted(task.mnt)


def test_start_error_traceback_is_the_users(tmp_path, roifs_bin):
    """An error while importing the user's file shows the traceback `python3 FILE.py` would
    show, from the user's first frame on (never roifs's _server.py nor importlib's frozen
    frames), then roifs's FILE:LINE: line; a SyntaxError only its place and caret."""
    (tmp_path / "helper.py").write_text("def g():\n    return 1 / 0\nx = g()\n")
    task = error_task(tmp_path, "import helper\ndef f(block, roi):\n    return block\n",
                      "f.py:f")
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 2, r
    err = r.stderr
    assert "_server.py" not in err and "<frozen" not in err, err
    lines = [ln.split(": ", 1)[1] if " warning: python " in ln else ln for ln in err.splitlines()]
    lines = [ln.split(": ", 1)[1] if ln.startswith("python ") else ln for ln in lines]
    start = lines.index("Traceback (most recent call last):")
    assert lines[start + 1].endswith('f.py", line 1, in <module>'), lines
    assert lines[start + 2].strip() == "import helper", lines
    assert any(ln.endswith('helper.py", line 2, in g') for ln in lines), lines
    assert lines.index("ZeroDivisionError: division by zero") < \
        next(i for i, ln in enumerate(lines) if ln.startswith("roifs: ")), lines
    (tmp_path / "s").mkdir()
    task = error_task(tmp_path / "s", "def f(block, roi):\n    return block +\n", "f.py:f")
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "_server.py" not in r.stderr, r
    assert 'f.py", line 2' in r.stderr and "SyntaxError: invalid syntax" in r.stderr, r.stderr


def test_interpreter_errors(tmp_path, roifs_bin):
    (tmp_path / "f.py").write_text("def f(block, roi):\n    return block\n")
    task = error_task(tmp_path, None, "f.py:f", interpreter="/no/such/python3")
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 2 and "[process] python: cannot run the interpreter /no/such/python3" \
        in r.stderr, r
    task = make_task(tmp_path / "b", np.zeros(4, "<u2"), (2,), rois=[((0, 4),)],
                     process={"builtin": "copy", "interpreter": PY})
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 2 and "[process] interpreter: only for a python processor" in r.stderr


def test_check_prints_threads(tmp_path, roifs_bin):
    (tmp_path / "f.py").write_text("def f(block, roi):\n    return block\n")
    task = error_task(tmp_path, None, "f.py:f")
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 0, r
    assert "processor: python f.py:f, 2 threads, readahead auto" in r.stdout, r.stdout
    task = make_task(tmp_path / "d", np.zeros(4, "<u2"), (2,), rois=[((0, 4),)],
                     process={"python": "../f.py:f"})
    r = run_roifs(roifs_bin, "check", task.config)
    assert f"processor: python ../f.py:f, {os.cpu_count()} threads (the default: one per " \
           f"CPU), readahead auto" in r.stdout, r.stdout


# ---------------------------------------------------------------- per-ROI failures

FAILING = """\
import numpy as np

def f(block, roi):
    if roi.index == 1:
        raise ValueError(f"no roi {roi.index} here")
    if roi.index == 2:
        return block[:1]
    if roi.index == 3:
        return np.zeros(block.shape, complex)
    return block * 10
"""


def test_roi_failures(tmp_path, mount):
    (tmp_path / "f.py").write_text(FAILING)
    inp = np.arange(1, 9, dtype="<i4")
    task = make_task(tmp_path, inp, (2,), rois=[((2 * i, 2 * i + 2),) for i in range(4)],
                     process={"python": "f.py:f", "threads": 2, "readahead": 0})
    with mount(task.config) as m:
        assert read_bytes(m / "0") == (inp[:2] * 10).tobytes()
        expect_eio(m / "1")
        assert errors_of(m, 1) == ["ValueError: no roi 1 here (f.py:5)"], m.status()
        expect_eio(m / "2")
        assert errors_of(m, 2) == ["ResultError: the function returned an array of shape (1,), "
                                   "expected (2,) (the read region)"], m.status()
        expect_eio(m / "3")
        assert errors_of(m, 3) == ["ResultError: the function returned complex128, which roifs "
                                   "cannot store as int32 (expected booleans, integers or "
                                   "floats)"]
        assert read_bytes(m / "0") == (inp[:2] * 10).tobytes()  # the mount keeps serving
        expect_eio(m / "1")  # tried again, failing again
        assert m.status()["rois"]["failed"] == 3
        log = m.log_text()
    assert "roi 1: Traceback (most recent call last):" in log, log
    assert 'raise ValueError(f"no roi {roi.index} here")' in log, log
    assert "_server.py" not in log, log  # the user's frames only, as Python shows them


# ---------------------------------------------------------------- the roi argument

ATTRS = """\
import json
import numpy as np

def f(block, roi):
    rec = {"index": roi.index, "start": roi.start, "stop": roi.stop,
           "in_start": roi.in_start, "in_shape": roi.in_shape,
           "out_dtype": roi.out_dtype.str, "dtype": roi.dtype.str, "params": roi.params,
           "label": roi.label, "block_shape": block.shape, "block_dtype": block.dtype.str,
           "writeable": block.flags.writeable, "type": type(block).__name__,
           "sum": int(block.sum()), "inner": [[s.start, s.stop] for s in roi.inner]}
    with open("attrs.txt", "a") as out:
        out.write(json.dumps(rec) + "\\n")
    try:
        block[...] = 0
        rec["wrote"] = True
    except ValueError:
        pass
    if roi.index == 1:  # in place: filled and returned, no copy
        roi.out[...] = block
        return roi.out
    return block.astype(np.float64) + 0.5  # float: rounded half to even
"""


def test_roi_attributes(tmp_path, mount):
    (tmp_path / "f.py").write_text(ATTRS)
    rng = np.random.default_rng(1)
    inp = rng.integers(0, 100, (20, 30)).astype("<u2")
    rois = [((0, 5), (0, 10)), ((5, 20), (3, 30)), ((10, 12), (12, 14))]
    task = make_task(tmp_path, inp, (10, 10), rois=rois,
                     process={"python": "f.py:f", "threads": 2, "param.alpha": "0.5",
                              "param.name": "x y"},
                     output={"dtype": "<i4"}, sections={"rois": {"halo": "1,2"}})
    want = np.zeros((20, 30), "<i4")
    for i, r in enumerate(rois):
        sl = tuple(slice(a, b) for a, b in r)
        v = inp[sl].astype(np.float64)
        want[sl] = v if i == 1 else np.rint(v + 0.5)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], want)
        assert m.status()["rois"]["failed"] == 0
    recs = {r["index"]: r for r in map(json.loads, (tmp_path / "attrs.txt").read_text().split("\n")[:-1])}
    assert sorted(recs) == [0, 1, 2]
    for i, (r0, r1) in enumerate(rois):
        rec = recs[i]
        in_start = [max(0, r0[0] - 1), max(0, r1[0] - 2)]
        in_stop = [min(20, r0[1] + 1), min(30, r1[1] + 2)]
        shape = [b - a for a, b in zip(in_start, in_stop)]
        assert rec["start"] == [r0[0], r1[0]] and rec["stop"] == [r0[1], r1[1]]
        assert rec["in_start"] == in_start and rec["in_shape"] == shape == rec["block_shape"]
        assert rec["inner"] == [[r0[0] - in_start[0], r0[1] - in_start[0]],
                                [r1[0] - in_start[1], r1[1] - in_start[1]]]
        assert rec["dtype"] == rec["block_dtype"] == "<u2" and rec["out_dtype"] == "<i4"
        assert rec["params"] == {"alpha": "0.5", "name": "x y"}
        assert rec["label"] is None
        assert rec["writeable"] is False and "wrote" not in rec and rec["type"] == "ndarray"
        sl = tuple(slice(a, b) for a, b in zip(in_start, in_stop))
        assert rec["sum"] == int(inp[sl].sum())


CAST = """\
import numpy as np
VALUES = {"f8": [-3.5, 0.5, 1.5, 2.5, 254.5, 300.7, float("nan"), -0.0],
          "i8": [-5, 0, 7, 255, 256, 10**12, -10**12, 3],
          "b1": [True, False, True, False, True, True, False, False]}

def f(block, roi):
    return np.array(VALUES[roi.params["kind"]], roi.params["kind"])
"""


@pytest.mark.parametrize("kind,out,want", [
    ("f8", "|u1", [0, 0, 2, 2, 254, 255, 0, 0]),
    ("f8", "<i2", [-4, 0, 2, 2, 254, 301, 0, 0]),
    ("i8", "|u1", [0, 0, 7, 255, 255, 255, 0, 3]),
    ("i8", "<i4", [-5, 0, 7, 255, 256, 2**31 - 1, -2**31, 3]),
    ("b1", "<f4", [1, 0, 1, 0, 1, 1, 0, 0]),
    ("f8", "|b1", [True, True, True, True, True, True, True, False]),
])
def test_result_cast_like_builtins(tmp_path, mount, kind, out, want):
    (tmp_path / "f.py").write_text(CAST)
    task = make_task(tmp_path, np.zeros(8, "<u2"), (8,), rois=[((0, 8),)],
                     process={"python": "f.py:f", "threads": 1, "param.kind": kind},
                     output={"dtype": out})
    with mount(task.config) as m:
        got = zarr.open(str(m.path), mode="r")[:]
    np.testing.assert_array_equal(got, np.array(want, out))


def test_worker_script_serves_as_python(tmp_path, mount):
    """A `worker =` script (its run() call unguarded) opts in by being named in `python =`."""
    (tmp_path / "w.py").write_text("import numpy as np\nfrom roifs_worker import run\n\n"
                                   "def process(block, roi):\n"
                                   "    print('computing', roi.index)\n"
                                   "    return block + 1\n\n"
                                   "run(process)\n")
    inp = np.arange(6, dtype="<u2")
    task = make_task(tmp_path, inp, (3,), rois=[((0, 6),)],
                     process={"python": "w.py:process", "threads": 1})
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], inp + 1)
        deadline = time.monotonic() + 5
        while ": computing 0" not in m.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert re.search(r"python worker \d+: computing 0", m.log_text()), m.log_text()


BATCHED = """\
import re

def f(block, roi):
    if roi.index == 7:
        raise ValueError("bad 7")
    if roi.index == 100:
        print("hello from 100")
    status = open("/proc/self/status").read()
    with open("switches.txt", "a") as out:
        out.write(re.search(r"voluntary_ctxt_switches:\\s*(\\d+)", status).group(1) + "\\n")
    return block * 3
"""


def test_small_rois_batched(tmp_path, mount):
    """Small ROIs go to a worker in batches (one round trip for up to 32): far fewer waits of
    the worker than ROIs; a ROI that raises fails alone, the others of its batch are
    served; output written during a batch reaches the log."""
    (tmp_path / "f.py").write_text(BATCHED)
    inp = np.arange(2048, dtype="<i4")
    task = make_task(tmp_path, inp, (256,), rois=[((4 * i, 4 * i + 4),) for i in range(512)],
                     process={"python": "f.py:f", "threads": 1, "readahead": 0})
    with mount(task.config) as m:
        expect_eio(m / "0")
        for c in range(1, 8):
            assert read_bytes(m / str(c)) == (inp[256 * c:256 * (c + 1)] * 3).tobytes()
        st = m.status()
        assert st["rois"]["failed"] == 1 and st["calls"] == 512, st
        assert errors_of(m, 7) == ["ValueError: bad 7 (f.py:5)"], st
        switches = [int(x) for x in (task.dir / "switches.txt").read_text().split()]
        assert len(switches) == 511
        # one ROI per round trip waited at least once per ROI
        assert max(switches) - min(switches) < 511 // 4, (min(switches), max(switches))
        assert "hello from 100" in m.log_text()


def test_worker_killed_mid_batch(tmp_path, mount):
    """A worker killed during a batch fails the ROIs of that batch (the chunk's read gets
    EIO, the status names the death); a new worker computes them on the next read."""
    (tmp_path / "f.py").write_text(SLOW.replace("roi.index == 1 ", "roi.index == 40 "))
    (tmp_path / "flag").touch()
    inp = np.arange(256, dtype="<i4")
    task = make_task(tmp_path, inp, (256,), rois=[((4 * i, 4 * i + 4),) for i in range(64)],
                     process={"python": "f.py:f", "threads": 1, "readahead": 0})
    with mount(task.config) as m:
        got, victim = read_killing_busy(m / "0", task.dir / "busy.txt")
        assert isinstance(got.get("error"), OSError) and got["error"].errno == errno.EIO, got
        # The read fails with the batch's first ROI; the others are recorded as failed just
        # after (one by one), so wait for them rather than read the status at once.
        wait_for(lambda: m.status()["rois"]["failed"] > 1 and errors_of(m, 40), timeout=10,
                 what="the batch's failures in the status")
        st = m.status()
        assert 1 < st["rois"]["failed"] <= 32, st  # its batch, not more
        assert errors_of(m, 40) == [f"python worker {victim} was killed by signal 9 before "
                                    f"replying"], st
        (task.dir / "flag").unlink()
        assert read_bytes(m / "0") == (inp * 10).tobytes()


# ---------------------------------------------------------------- workers that die or hang

SLOW = """\
import os, time
import numpy as np

def f(block, roi):
    if roi.index == 1 and os.path.exists("flag"):
        with open("busy.txt", "w") as out:
            out.write(str(os.getpid()))
        time.sleep(60)
    with open("pids.txt", "a") as out:
        out.write(f"{os.getpid()}\\n")
    return block * 10
"""


def slow_task(tmp_path, **process):
    (tmp_path / "f.py").write_text(SLOW)
    (tmp_path / "flag").touch()
    inp = np.arange(1, 9, dtype="<i4")
    task = make_task(tmp_path, inp, (2,), rois=[((2 * i, 2 * i + 2),) for i in range(4)],
                     process={"python": "f.py:f", "threads": 2, "readahead": 0, **process})
    return task, inp * 10


def test_worker_killed_mid_roi(tmp_path, mount):
    task, want = slow_task(tmp_path)
    with mount(task.config) as m:
        assert read_bytes(m / "0") == want[0:2].tobytes()
        before = interpreters(task.dir)
        assert len(before) == 3, before  # the server and `threads` workers, ready
        got, victim = read_killing_busy(m / "1", task.dir / "busy.txt")
        assert isinstance(got.get("error"), OSError) and got["error"].errno == errno.EIO, got
        assert errors_of(m, 1) == [f"python worker {victim} was killed by signal 9 before "
                                   f"replying"], m.status()
        for i in (2, 3):  # the mount keeps serving
            assert read_bytes(m / str(i)) == want[2 * i:2 * i + 2].tobytes()
        (task.dir / "flag").unlink()
        assert read_bytes(m / "1") == want[2:4].tobytes()  # a new fork computes it
        now = interpreters(task.dir)
        assert victim not in now and len(now) == 3, (before, now)
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], want)
    assert not wait_no_interpreters(task.dir), "interpreters left after unmount"


def test_worker_timeout(tmp_path, mount):
    task, want = slow_task(tmp_path, timeout=1)
    with mount(task.config) as m:
        t0 = time.monotonic()
        expect_eio(m / "1")
        assert 0.9 < time.monotonic() - t0 < 5
        victim = int((task.dir / "busy.txt").read_text())
        assert any(f"python worker {victim} timed out after 1 s" in s for s in errors_of(m, 1))
        deadline = time.monotonic() + 5
        while victim in interpreters(task.dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert victim not in interpreters(task.dir), "the worker past its timeout still runs"
        (task.dir / "flag").unlink()
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], want)


def test_unmount_with_a_busy_worker(tmp_path, mount):
    """An unmount while a ROI runs (60 s of sleep, queued by readahead) ends at once: the ROI's
    worker is killed."""
    task, want = slow_task(tmp_path, threads=1, readahead=3)
    with mount(task.config) as m:
        assert read_bytes(m / "0") == want[0:2].tobytes()
        busy = task.dir / "busy.txt"
        deadline = time.monotonic() + 20
        while not busy.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert busy.exists()
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 5, "the unmount waited for the busy worker"
    assert not wait_no_interpreters(task.dir), "interpreters left after unmount"


def test_worker_exits_while_idle(tmp_path, mount):
    """A worker that dies between ROIs is replaced before the next ROI, which succeeds."""
    task, want = slow_task(tmp_path, threads=1)
    (task.dir / "flag").unlink()
    with mount(task.config) as m:
        assert read_bytes(m / "0") == want[0:2].tobytes()
        server, worker = sorted(interpreters(task.dir))
        os.kill(worker, signal.SIGKILL)
        time.sleep(0.3)
        assert read_bytes(m / "1") == want[2:4].tobytes()
        assert m.status()["rois"]["failed"] == 0
        assert "while idle; forking a new one" in m.log_text()


def ppid(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def test_fork_server_killed_mid_roi(tmp_path, mount):
    """kill -9 of the fork server while a ROI runs: its workers die with it, that ROI fails
    (status and log say so), a new server is started and a later read succeeds."""
    task, want = slow_task(tmp_path)
    with mount(task.config) as m:
        assert read_bytes(m / "0") == want[0:2].tobytes()
        before = interpreters(task.dir)
        busy = task.dir / "busy.txt"
        got = {}

        def reader():
            try:
                got["data"] = read_bytes(m / "1")
            except OSError as e:
                got["error"] = e

        t = threading.Thread(target=reader)
        t.start()
        deadline = time.monotonic() + 20
        while not (busy.exists() and busy.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        worker = int(busy.read_text())
        server = ppid(worker)
        assert server in before and worker in before, (server, worker, before)
        os.kill(server, signal.SIGKILL)
        t.join(20)
        assert not t.is_alive()
        assert isinstance(got.get("error"), OSError) and got["error"].errno == errno.EIO, got
        assert any(f"python worker {worker} is gone (and so is the fork server)" in e
                   for e in errors_of(m, 1)), m.status()
        (task.dir / "flag").unlink()
        assert read_bytes(m / "1") == want[2:4].tobytes()
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], want)
        now = interpreters(task.dir)
        assert len(now) == 3 and not set(now) & set(before), (before, now)
        assert f"the fork server {server} is gone" in m.log_text(), m.log_text()
    assert not wait_no_interpreters(task.dir), "interpreters left after unmount"


def test_fork_server_killed_while_idle(tmp_path, mount):
    """kill -9 of the idle fork server (its workers die with it): the next read starts a new
    server and succeeds, no ROI fails."""
    task, want = slow_task(tmp_path)
    (task.dir / "flag").unlink()
    with mount(task.config) as m:
        assert read_bytes(m / "0") == want[0:2].tobytes()
        before = interpreters(task.dir)
        server = [p for p in before if ppid(p) not in before]
        assert len(server) == 1, before
        os.kill(server[0], signal.SIGKILL)
        deadline = time.monotonic() + 5
        while interpreters(task.dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not interpreters(task.dir), "the workers outlived their server"
        for i in (1, 2, 3):
            assert read_bytes(m / str(i)) == want[2 * i:2 * i + 2].tobytes()
        assert m.status()["rois"]["failed"] == 0, m.status()
        now = interpreters(task.dir)  # a new server and `threads` new workers
        assert len(now) == 3 and not set(now) & set(before), (before, now)
        assert f"the fork server {server[0]} is gone" in m.log_text(), m.log_text()
    assert not wait_no_interpreters(task.dir), "interpreters left after unmount"


def test_clean_starts_no_interpreter(tmp_path, roifs_bin):
    """`roifs clean` (and `clean --unused`) need the cache's place, not the processor: the
    user's file is not imported."""
    (tmp_path / "f.py").write_text(
        "open('imported', 'a').write('x')\n\ndef f(block, roi):\n    return block\n")
    task = make_task(tmp_path, np.arange(8, dtype="<i4"), (2,), rois=[((0, 4),)],
                     process={"python": "f.py:f"})
    for args in (["clean"], ["clean", "--unused"]):
        r = run_roifs(roifs_bin, *args, task.config)
        assert r.returncode == 0, r
        assert not (task.dir / "imported").exists(), f"roifs {' '.join(args)} imported f.py"
    r = run_roifs(roifs_bin, "check", task.config)  # check does start it (the control)
    assert r.returncode == 0, r
    assert (task.dir / "imported").exists()


# ---------------------------------------------------------------- nothing left behind


def test_nothing_left_after_unmount_or_kill(tmp_path, roifs_bin):
    """A background mount: the fork server starts before the daemon forks, which inherits it.
    unmount ends the interpreters; so does kill -9 of the daemon."""
    task, want = slow_task(tmp_path)
    (task.dir / "flag").unlink()
    task.mnt.mkdir()
    for how in ("unmount", "kill"):
        r = run_roifs(roifs_bin, "mount", task.config, task.mnt, timeout=30)
        assert r.returncode == 0, r
        try:
            assert len(interpreters(task.dir)) == 3
            np.testing.assert_array_equal(zarr.open(str(task.mnt), mode="r")[:], want)
            daemon = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and
                      b"mount" in _cmdline(p) and str(task.mnt).encode() in _cmdline(p)]
            assert len(daemon) == 1, daemon
            if how == "unmount":
                assert run_roifs(roifs_bin, "unmount", task.mnt).returncode == 0
                deadline = time.monotonic() + 10
                while state(daemon[0]) not in (None, "Z") and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert interpreters(task.dir) == [], "interpreters left after unmount"
            else:
                os.kill(daemon[0], signal.SIGKILL)
                assert not wait_no_interpreters(task.dir, 5), "interpreters left after kill -9"
        finally:
            if is_mounted(task.mnt):
                lazy_unmount(task.mnt)
        C = task.cache
        subprocess.run(["rm", "-rf", str(C)])


def test_background_mount_ready_every_time(tmp_path, roifs_bin):
    """`roifs mount` forks its daemon right after opening the cache, whose claim renewal thread
    has just started: whatever that thread held at the fork stayed held in the daemon, which
    hung before it mounted (a sanitized build: nearly every time with a Python processor, the
    allocator's lock; any build: the claims' lock, when the thread was renewing). Each mount
    must be ready, and serve, within the timeout."""
    task, want = slow_task(tmp_path)
    (task.dir / "flag").unlink()
    task.mnt.mkdir()
    for _ in range(5):
        subprocess.run(["rm", "-rf", str(task.cache)])
        try:
            r = run_roifs(roifs_bin, "mount", task.config, task.mnt, timeout=20)
            assert r.returncode == 0, r
            np.testing.assert_array_equal(zarr.open(str(task.mnt), mode="r")[:], want)
            assert run_roifs(roifs_bin, "unmount", task.mnt).returncode == 0
        finally:
            if is_mounted(task.mnt):
                lazy_unmount(task.mnt)
            for p in Path("/proc").iterdir():  # a daemon that hung before mounting
                if p.name.isdigit() and b"mount" in _cmdline(p) and \
                        str(task.mnt).encode() in _cmdline(p):
                    os.kill(int(p.name), signal.SIGKILL)
        assert not wait_no_interpreters(task.dir, 10), "interpreters left after unmount"


def _cmdline(p):
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


# ---------------------------------------------------------------- import roifs

MOUNTED = """\
import sys, zarr, roifs
cfg = sys.argv[1]
with roifs.mounted(cfg) as path:
    print(path, list(zarr.open(path, mode="r")[:]))
try:
    with roifs.mounted(cfg) as path:
        where = path
        raise KeyError("inside")
except KeyError:
    print("after", where, __import__("os").path.exists(where))
try:
    with roifs.mounted(sys.argv[2]):
        pass
except roifs.MountError as e:
    print("error", e.returncode, e)
"""


def test_roifs_mounted(tmp_path, roifs_bin):
    (tmp_path / "w.py").write_text("from roifs.worker import run\n\n"
                                   "def process(block, roi):\n    return block * 3\n\n"
                                   "run(process)\n")
    inp = np.arange(4, dtype="<u2")
    task = make_task(tmp_path, inp, (2,), rois=[((0, 4),)],
                     process={"worker": f"{PY} w.py", "threads": 1})
    bad = tmp_path / "bad.ini"
    bad.write_text("[input]\npath = nothere.zarr\n")
    (tmp_path / "m.py").write_text(MOUNTED)
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "ROIFS_BIN": roifs_bin}
    r = subprocess.run([PY, str(tmp_path / "m.py"), str(task.config), str(bad)], env=env,
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    path = lines[0].split()[0]
    assert lines[0] == f"{path} [0, 3, 6, 9]", lines
    assert not os.path.exists(path) and not is_mounted(path)
    after = lines[1].split()
    assert after[0] == "after" and after[2] == "False" and not is_mounted(after[1]), lines
    assert lines[2].startswith(f"error 2 roifs: {bad}"), lines


def test_import_roifs_after_install(tmp_path, roifs_bin):
    """meson install puts the package where Debian's python3 finds it (for /usr/local)."""
    build = Path(roifs_bin).parent
    if not (build / "build.ninja").exists():
        pytest.skip("ROIFS_BIN is not in a meson build directory")
    dest = tmp_path / "dest"
    r = subprocess.run(["meson", "install", "-C", str(build), "--no-rebuild", "--quiet",
                        "--destdir", str(dest)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    prefix = json.loads(subprocess.run(["meson", "introspect", "--buildoptions", str(build)],
                                       capture_output=True, text=True).stdout)
    prefix = next(o["value"] for o in prefix if o["name"] == "prefix")
    sys_path = subprocess.run([PY, "-c", "import sys; print('\\n'.join(sys.path))"],
                              capture_output=True, text=True, cwd="/", env={}).stdout.split()
    site = [p for p in sys_path if p.startswith(prefix + "/lib/") and (dest / p[1:]).is_dir()]
    assert site, f"nothing installed into {prefix}'s part of sys.path {sys_path}"
    r = subprocess.run([PY, "-c", "import roifs, roifs.worker, roifs_worker, roifs._install as i;"
                        "print(roifs.__file__, roifs_worker.run is roifs.worker.run, i.BINARY)"],
                       env={"PYTHONPATH": str(dest / site[0][1:])}, capture_output=True,
                       text=True, cwd="/")
    assert r.returncode == 0, r
    assert r.stdout.split() == [str(dest / site[0][1:] / "roifs" / "__init__.py"), "True",
                                f"{prefix}/bin/roifs"], r.stdout


def test_module_spec_and_shadowing_file(tmp_path, mount):
    """MODULE:FUNCTION imports from the configuration's directory, where a file named
    roifs.py does not hide roifs's own package from the fork server."""
    (tmp_path / "roifs.py").write_text("raise ImportError('the wrong roifs')\n")
    (tmp_path / "mymod.py").write_text("def twice(block, roi):\n    return block * 2\n")
    inp = np.arange(6, dtype="<u2")
    task = make_task(tmp_path, inp, (3,), rois=[((0, 6),)],
                     process={"python": "mymod:twice", "threads": 1})
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], inp * 2)
