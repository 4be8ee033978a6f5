"""Processors end to end (docs/processors.md): the same function as builtin, command, worker (with
python/roifs_worker.py) and plugin gives the same chunks, halo included; broken workers fail
their ROI only and are replaced; bad plugins refuse the mount."""
import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import (PY, all_chunks, chunk_key, line_of, make_task, pid_alive, read_bytes,
                      read_killing_busy, run_roifs)

SHAPE, CHUNKS, HALO = (40, 60), (16, 16), 2
ROIS = [((0, 12), (0, 20)), ((5, 30), (10, 45)), ((20, 40), (30, 60)), ((14, 18), (2, 58)),
        ((33, 40), (0, 9)), ((0, 40), (50, 53))]

# Each records "ROI IN_START IN_SHAPE" to regions.txt so that the test can check the read
# region it was handed.
ADD_COMMAND = """\
import os, sys, numpy as np
shape = [int(v) for v in os.environ["ROIFS_IN_SHAPE"].split(",")]
with open("regions.txt", "a") as f:
    f.write(f'{os.environ["ROIFS_ROI"]} {os.environ["ROIFS_IN_START"]} '
            f'{",".join(map(str, shape))}\\n')
a = np.frombuffer(sys.stdin.buffer.read(), os.environ["ROIFS_IN_DTYPE"]).reshape(shape)
out = a + int(os.environ["ROIFS_PARAM_VALUE"])
sys.stdout.buffer.write(out.astype(os.environ["ROIFS_OUT_DTYPE"]).tobytes())
"""

ADD_WORKER = """\
from roifs_worker import run

def process(block, roi):
    print("computing", roi)  # goes to the log, not into the protocol
    with open("regions.txt", "a") as f:
        f.write(f'{roi.index} {",".join(map(str, roi.in_start))} '
                f'{",".join(map(str, roi.in_shape))}\\n')
    return block + int(roi.params["value"])

if __name__ == "__main__":
    run(process)
"""


def plugin_path(roifs_bin, name):
    path = Path(roifs_bin).parent / "examples" / "plugins" / name
    if not path.exists():
        pytest.fail(f"{path} is not built (ninja -C {Path(roifs_bin).parent})")
    return path


def read_region(roi, halo, shape):
    start = [max(0, a - halo) for a, _ in roi]
    stop = [min(s, b + halo) for (_, b), s in zip(roi, shape)]
    return start, [b - a for a, b in zip(start, stop)]


def recorded_regions(path):
    out = {}
    for line in path.read_text().split("\n"):
        if line:
            roi, start, shape = line.split()
            out[int(roi)] = ([int(v) for v in start.split(",")], [int(v) for v in shape.split(",")])
    return out


def test_same_function_every_kind(tmp_path, mount, roifs_bin):
    rng = np.random.default_rng(3)
    inp = rng.integers(0, 4000, SHAPE).astype("<u2")
    want = np.zeros(SHAPE, "<u2")
    for roi in ROIS:
        sl = tuple(slice(a, b) for a, b in roi)
        want[sl] = inp[sl] + 5
    kinds = {
        "builtin": {"builtin": "add"},
        "command": {"command": f"{PY} add_command.py"},
        "worker": {"worker": f"{PY} add_worker.py"},
        "worker_m": {"worker": f"{PY} -m roifs_worker add_worker:process"},
        "plugin": {"plugin": str(plugin_path(roifs_bin, "libadd_plugin.so"))},
    }
    results = {}
    for kind, process in kinds.items():
        d = tmp_path / kind
        d.mkdir()
        (d / "add_command.py").write_text(ADD_COMMAND)
        (d / "add_worker.py").write_text(ADD_WORKER)
        task = make_task(d, inp, CHUNKS, rois=ROIS,
                         process={**process, "param.value": "5", "threads": 2},
                         output={"compressor": "none"},
                         sections={"rois": {"halo": f"{HALO},{HALO}"}})
        with mount(task.config) as m:
            results[kind] = {chunk_key(c): read_bytes(m / chunk_key(c))
                             for c in all_chunks(SHAPE, CHUNKS)}
            np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want,
                                          err_msg=kind)
            st = m.status()
            assert st["calls"] == len(ROIS) and st["rois"]["failed"] == 0, (kind, st)
        if kind.startswith(("command", "worker")):  # each got its read region
            regions = recorded_regions(d / "regions.txt")
            assert regions == {i: read_region(r, HALO, SHAPE) for i, r in enumerate(ROIS)}, kind
        if kind.startswith("worker"):
            assert "computing Roi(index=" in m.log_text(), "print() did not reach the log"
    for kind in kinds:
        assert results[kind] == results["builtin"], f"{kind} differs from builtin"


# A worker speaking the protocol by hand (no numpy: quick to start): <i4 in and out, replies
# in * 10. Appends its pid to pids.txt. While the flag file exists, misbehaves on ROI 1 as
# argv[1] says.
RAW_WORKER = """\
import array, json, os, sys, time
mode = sys.argv[1]
inp, out = sys.stdin.buffer, sys.stdout.buffer
with open("pids.txt", "a") as f:
    f.write(f"{os.getpid()}\\n")
while True:
    line = inp.readline()
    if not line:
        break
    rq = json.loads(line)
    a = array.array("i")
    a.frombytes(inp.read(rq["nbytes"]))
    res = array.array("i", (10 * x for x in a)).tobytes()
    header = b'{"ok": true, "nbytes": %d}\\n' % len(res)
    if rq["roi"] == 1 and os.path.exists("flag"):
        if mode in ("kill", "timeout"):
            with open("busy.txt", "w") as f:
                f.write(str(os.getpid()))
            time.sleep(60)
        elif mode == "garbage":
            header = b"this is not json\\n"
        elif mode == "nbytes":
            header = b'{"ok": true, "nbytes": %d}\\n' % (len(res) + 4)
            res += b"\\0\\0\\0\\0"
        elif mode == "error":
            header, res = b'{"ok": false, "error": "roi 1 refused on purpose"}\\n', b""
    out.write(header + res)
    out.flush()
"""

RAW_ROIS = [((0, 2),), ((2, 4),), ((4, 6),), ((6, 8),)]  # ROI i lies in chunk i


def raw_worker_task(tmp_path, mode, **process):
    (tmp_path / "raw_worker.py").write_text(RAW_WORKER)
    (tmp_path / "flag").touch()
    inp = np.arange(1, 9, dtype="<i4")
    task = make_task(tmp_path, inp, (2,), rois=RAW_ROIS,
                     process={"worker": f"{PY} raw_worker.py {mode}", "threads": 2,
                              "readahead": 0, **process},
                     output={"compressor": "none"})
    return task, inp * 10


def expect_eio(path):
    with pytest.raises(OSError) as e:
        read_bytes(path)
    assert e.value.errno == errno.EIO, f"expected EIO, got {e.value!r}"


def pids(task):
    return [int(p) for p in (task.dir / "pids.txt").read_text().split()]


def wait_gone(pid_list, timeout=5):
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pid_list) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pid_list if pid_alive(p)]


def roi1_errors(m):
    return [e["message"] for e in m.status()["errors"] if e.get("roi") == 1]


def test_worker_killed_mid_roi(tmp_path, mount):
    task, want = raw_worker_task(tmp_path, "kill")
    with mount(task.config) as m:
        assert read_bytes(m / "0") == want[0:2].tobytes()
        got, victim = read_killing_busy(m / "1", task.dir / "busy.txt")
        assert isinstance(got.get("error"), OSError) and got["error"].errno == errno.EIO, got
        msgs = roi1_errors(m)
        assert any("worker" in s and "(signal 9) before replying" in s for s in msgs), msgs
        for i in (2, 3):  # the mount keeps serving
            assert read_bytes(m / str(i)) == want[2 * i:2 * i + 2].tobytes()
        (task.dir / "flag").unlink()
        assert read_bytes(m / "1") == want[2:4].tobytes()  # with a new worker
        started = pids(task)
        assert victim in started and len(started) >= 2 and started[-1] != victim
    assert not wait_gone(started), f"worker processes left after unmount: {started}"


@pytest.mark.parametrize("mode,message", [
    ("timeout", "timed out after 1 s"),
    ("garbage", "broke the protocol: expected a JSON reply line with \"ok\", got 'this is not "
                "json'"),
    ("nbytes", "broke the protocol: reply has nbytes 12, expected 8"),
    ("error", "roi 1 refused on purpose"),
])
def test_worker_failures(tmp_path, mount, mode, message):
    task, want = raw_worker_task(tmp_path, mode, timeout=1)
    with mount(task.config) as m:
        assert read_bytes(m / "0") == want[0:2].tobytes()
        t0 = time.monotonic()
        expect_eio(m / "1")
        if mode == "timeout":
            assert 0.9 < time.monotonic() - t0 < 5
        assert any(message in s for s in roi1_errors(m)), roi1_errors(m)
        for i in (2, 3):
            assert read_bytes(m / str(i)) == want[2 * i:2 * i + 2].tobytes()
        n_before = len(pids(task))
        (task.dir / "flag").unlink()
        assert read_bytes(m / "1") == want[2:4].tobytes()
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], want)
        # ok: false keeps the worker; a broken one was replaced
        assert len(set(pids(task))) == (n_before if mode == "error" else max(n_before, 2))
        started = pids(task)
    assert not wait_gone(started), f"worker processes left after unmount: {started}"


def test_plugin_abi_mismatch_refused(tmp_path, roifs_bin):
    lib = plugin_path(roifs_bin, "libbad_abi_plugin.so")
    task = make_task(tmp_path, np.zeros(4, "<u2"), (2,), rois=[((0, 4),)],
                     process={"plugin": str(lib)})
    line = line_of(task.config, r"^plugin")
    task.mnt.mkdir()
    for args in (("check", task.config), ("mount", task.config, task.mnt)):
        r = run_roifs(roifs_bin, *args)
        assert r.returncode == 2, r
        assert (f"roifs: {task.config}:{line}: [process] plugin: {lib} has plugin ABI 2, this "
                f"roifs supports 1") in r.stderr, r.stderr
    assert not os.path.ismount(task.mnt)


@pytest.mark.parametrize("param,message", [
    ({"param.value": "abc"}, "param.value: 'abc' is not a number"),
    ({"param.colour": "red"}, "param.colour: unknown parameter (add takes only value)"),
])
def test_plugin_init_error_refused(tmp_path, roifs_bin, param, message):
    lib = plugin_path(roifs_bin, "libadd_plugin.so")
    task = make_task(tmp_path, np.zeros(4, "<u2"), (2,), rois=[((0, 4),)],
                     process={"plugin": str(lib), **param})
    task.mnt.mkdir()
    r = run_roifs(roifs_bin, "mount", task.config, task.mnt)
    assert r.returncode == 2, r
    line = line_of(task.config, r"^plugin")
    assert f"roifs: {task.config}:{line}: [process] plugin: {lib}: {message}" in r.stderr, r.stderr
    assert not os.path.ismount(task.mnt)


def test_plugin_missing_refused(tmp_path, roifs_bin):
    task = make_task(tmp_path, np.zeros(4, "<u2"), (2,), rois=[((0, 4),)],
                     process={"plugin": "libnothere.so"})
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 2, r
    assert f"[process] plugin: {task.dir}/libnothere.so: cannot open shared object file" in \
        r.stderr, r.stderr


def test_plugin_process_error(tmp_path, mount, roifs_bin):
    """A ROI the plugin refuses (float16: the example does not handle it) fails with the
    plugin's message; the mount keeps serving."""
    lib = plugin_path(roifs_bin, "libadd_plugin.so")
    inp = np.arange(8, dtype="<f2")
    task = make_task(tmp_path, inp, (2,), rois=RAW_ROIS, process={"plugin": str(lib)},
                     output={"compressor": "none", "dtype": "<f4"})
    with mount(task.config) as m:
        expect_eio(m / "1")
        msgs = roi1_errors(m)
        assert any("plugin add: dtype <f2 -> <f4 is not supported" in s for s in msgs), msgs
        assert m.alive() and (m / ".zarray").read_bytes()
        expect_eio(m / "2")


def minor_faults(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[7])


def test_roi_buffers_reused(tmp_path, mount, roifs_bin):
    """ROIs of one size reuse the daemon's buffers of the last ROI (input, output, result):
    no fresh pages faulted in and zeroed per ROI. 2 MiB ROIs, a 4 MiB uint32 output, two
    compute threads (glibc's per-thread arenas): fewer page faults per ROI than the output
    buffer has pages (about 2,100 per ROI when each buffer was mmap'ed afresh)."""
    with open(roifs_bin, "rb") as f:
        if b"__asan_init" in f.read():
            pytest.skip("AddressSanitizer replaces glibc's malloc, whose tuning this checks")
    n = 16
    data = np.full((n, 1024, 1024), 7, dtype="<u2")
    task = make_task(tmp_path, data, (1, 1024, 1024),
                     rois=[((i, i + 1), (0, 1024), (0, 1024)) for i in range(n)],
                     process={"builtin": "copy", "threads": 2, "readahead": 0},
                     output={"dtype": "<u4"})
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    with mount(task.config, env=env) as m:
        read_bytes(m / "0.0.0")  # the first ROI of each thread allocates
        read_bytes(m / "1.0.0")
        f0 = minor_faults(m.proc.pid)
        for i in range(2, n):
            assert len(read_bytes(m / f"{i}.0.0")) == 4 << 20
        per_roi = (minor_faults(m.proc.pid) - f0) / (n - 2)
    print(f"{per_roi:.0f} page faults per ROI")
    assert per_roi < (4 << 20) / 4096, f"{per_roi:.0f} page faults per ROI"
