"""A cache is never taken on trust (issue 13 items 2, 3 and 6): damaged, truncated, copied or
shared cache entries are recomputed (and logged), never served and never a permanent EIO; two
configurations on one cache directory never mix; and a change of the code a processor runs (a
command's script, a worker's script, a plugin) makes new results."""
import errno
import os
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import (PY, REPO, chunk_key, is_mounted, lazy_unmount, make_task, read_bytes,
                      run_roifs, write_config)

SHAPE, CH = (16, 32), (16, 16)  # two chunks, 0.0 and 0.1
# ROI 0 spans both chunks; ROI 1 lies in 0.0, ROI 2 in 0.1
ROIS = [((2, 10), (8, 24)), ((10, 14), (0, 6)), ((10, 14), (20, 30))]


def spanning_task(tmp_path, compressor="none", **kw):
    data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
    task = make_task(tmp_path, data, CH, rois=ROIS,
                     process={"builtin": "add", "param.value": 3, "threads": 1,
                              "readahead": 0},
                     output={"compressor": compressor, "fill_value": -1}, **kw)
    return task, reference(data)


def reference(data, value=3):
    ref = np.full(SHAPE, -1, "<i4")
    for (y0, y1), (x0, x1) in ROIS:
        ref[y0:y1, x0:x1] = data[y0:y1, x0:x1] + value
    return ref


def chunk_of(m, key):
    return np.frombuffer(read_bytes(m / key), "<i4").reshape(CH)


def stored_result_files(cache):
    """Files holding stored ROI results: rois/<i> (layout 1) or results/pack-* (layouts 2 and 3)."""
    return sorted([*(cache / "rois").glob("*"), *(cache / "results").glob("pack-*")])


def records(pack):
    """(offset, header size, stored length) of each record of a layout-2 pack."""
    data, off, out = pack.read_bytes(), 0, []
    while off + 56 <= len(data) and data[off:off + 7] == b"roifsP1":
        stored = struct.unpack_from("<Q", data, off + 32)[0]
        out.append((off, 56, stored))
        off += 56 + stored
    return out


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


# ---------------------------------------------------------------- 13.3: damaged entries


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_damaged_stored_result_is_recomputed(tmp_path, mount, damage):
    """ROI 0 spans both chunks: after chunk 0.0 alone was read, its result is stored for 0.1.
    A damaged copy of it must be computed again, not serve EIO forever nor wrong data."""
    task, ref = spanning_task(tmp_path)
    with mount(task.config) as m:
        np.testing.assert_array_equal(chunk_of(m, "0.0"), ref[:, 0:16])
    files = stored_result_files(task.cache)
    assert files
    for f in files:
        if damage == "truncated":
            os.truncate(f, min(f.stat().st_size, 64))
        elif f.parent.name == "rois":
            flip(f, f.stat().st_size - 1)
        else:
            for off, hdr, stored in records(f):
                flip(f, off + hdr + stored - 1)  # the last byte of each result
    with mount(task.config) as m:
        for _ in range(2):  # and never a permanent error
            np.testing.assert_array_equal(chunk_of(m, "0.1"), ref[:, 16:32])
        st = m.status()
        assert st["errors"] == [] and st["rois"]["failed"] == 0, st
        assert st["calls"] == 2  # ROI 0 again, and ROI 2
        if damage == "flipped":
            assert "fails its checksum; computing it again" in m.log_text()


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_damaged_cached_chunk_is_recomputed(tmp_path, mount, roifs_bin, damage):
    task, ref = spanning_task(tmp_path, compressor="blosc" if damage == "truncated" else "none")
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    f = task.cache / "chunks" / "1"
    if damage == "truncated":
        os.truncate(f, f.stat().st_size // 2)
    else:
        flip(f, 4 * (5 * 16 + 10))  # an element inside ROI 0
    with mount(task.config) as m:
        z = zarr.open(str(m.path), mode="r")
        for _ in range(2):
            np.testing.assert_array_equal(z[:], ref)
        st = m.status()
        assert st["errors"] == [] and st["calls"] == 0, st  # made again from stored results
        why = "has the wrong length" if damage == "truncated" else "fails its checksum"
        assert f"chunk 1: its cache file {task.cache}/chunks/1 {why}" in m.log_text()
    with mount(task.config) as m:  # the repaired file is current
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)


def test_copied_cache_after_an_input_change(tmp_path, mount, roifs_bin):
    """cp -r drops the extended attributes that record what each chunk was made of: such a
    chunk is not current, whatever the input did since."""
    task, _ = spanning_task(tmp_path)
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(task.cache), str(copy)], check=True)
    task.config.write_text(task.config.read_text().replace(f"dir = {task.cache}",
                                                           f"dir = {copy}"))
    data = zarr.open(str(task.input), mode="r")[:]
    data[:, 16:32] += 100  # input chunk 0.1: ROIs 0 and 2 read it
    zarr.open(str(task.input), mode="r+")[:, 16:32] = data[:, 16:32]
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data))
        assert m.status()["calls"] == 2
        assert "has no record of what it was made from" in m.log_text()


@pytest.fixture
def ramfs(tmp_path):
    d = tmp_path / "ramfs"
    d.mkdir()
    subprocess.run(["mount", "-t", "ramfs", "-o", "mode=0700", "ramfs", str(d)], check=True)
    yield d
    subprocess.run(["umount", "-l", str(d)])


def test_cache_without_user_xattrs(tmp_path, mount, ramfs):
    """ramfs keeps no user extended attributes: chunk records go to sidecar files, which tell
    an input change and a damaged chunk just as well."""
    task, ref = spanning_task(tmp_path, sections={"cache": {"dir": str(ramfs / "cache")}})
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        log = m.log_text()
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert m.status()["calls"] == 0
    data = zarr.open(str(task.input), mode="r")[:]
    data[:, 0:16] -= 50  # input chunk 0.0: ROIs 0 and 1
    zarr.open(str(task.input), mode="r+")[:, 0:16] = data[:, 0:16]
    flip(ramfs / "cache" / "chunks" / "1", 0)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data))
        assert m.status()["calls"] == 2
    assert "sidecar files" in log
    assert (ramfs / "cache" / "chunks" / "1.meta").exists()


# ---------------------------------------------------------------- 13.2: two configurations


def two_configs(tmp_path):
    task, ref_a = spanning_task(tmp_path)
    b = tmp_path / "b.ini"
    b.write_text(task.config.read_text().replace("param.value = 3", "param.value = 5"))
    data = zarr.open(str(task.input), mode="r")[:]
    return task, task.config, b, ref_a, reference(data, 5)


def mount_refused(roifs_bin, config, mnt):
    mnt.mkdir(exist_ok=True)
    try:
        r = run_roifs(roifs_bin, "mount", "-f", config, mnt, timeout=30)
    finally:
        if is_mounted(mnt):
            lazy_unmount(mnt)
    return r


@pytest.mark.parametrize("first", ["a", "b"])
def test_two_configurations_on_one_cache(tmp_path, mount, roifs_bin, first):
    task, a, b, ref_a, ref_b = two_configs(tmp_path)
    cfgs, refs = {"a": a, "b": b}, {"a": ref_a, "b": ref_b}
    second = "b" if first == "a" else "a"
    with mount(cfgs[first]) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], refs[first])
        for r in (run_roifs(roifs_bin, "warm", cfgs[second]),
                  mount_refused(roifs_bin, cfgs[second], tmp_path / "mnt2")):
            assert r.returncode == 2, r.stderr
            assert (f"roifs: {task.cache}: in use by {cfgs[first]} (pid {m.proc.pid} on {socket.gethostname()}); a cache "
                    "directory serves one configuration at a time") in r.stderr, r.stderr
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], refs[first])
    # one after the other: each gets its own results, never the other's, nothing emptied
    r = run_roifs(roifs_bin, "warm", cfgs[second])
    assert r.returncode == 0 and "emptying" not in r.stderr, r.stderr
    for name in (first, second, first):
        with mount(cfgs[name]) as m:
            np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], refs[name])
            assert m.status()["calls"] == 0  # each one's results are kept, by key
            assert "emptying" not in m.log_text()


def test_same_configuration_twice_is_allowed(tmp_path, mount, roifs_bin):
    task, ref = spanning_task(tmp_path)
    with mount(task.config) as m:
        r = run_roifs(roifs_bin, "warm", task.config)
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)


# ---------------------------------------------------------------- 13.6: processor code

SCRIPT = """\
import sys, numpy as np
a = np.frombuffer(sys.stdin.buffer.read(), "<i4")
sys.stdout.buffer.write((a + {delta}).astype("<i4").tobytes())
"""
WORKER = """\
from roifs_worker import run

def process(block, roi):
    return block + {delta}

if __name__ == "__main__":
    run(process)
"""
PLUGIN = r"""
#include <stdint.h>
#include <string.h>
#include <roifs/plugin.h>
static int process(void *state, const struct roifs_roi *roi, const void *in, void *out,
                   char *err, size_t errlen)
{
    (void)state, (void)err, (void)errlen;
    for (size_t i = 0; i < roi->nelems; i++) {
        int32_t v;
        memcpy(&v, (const char *)in + 4 * i, 4);
        v += DELTA;
        memcpy((char *)out + 4 * i, &v, 4);
    }
    return 0;
}
static const struct roifs_plugin plugin = {.abi = ROIFS_PLUGIN_ABI, .name = "delta",
                                           .process = process};
const struct roifs_plugin *roifs_plugin(void) { return &plugin; }
"""


def build_plugin(tmp_path, delta):
    src = tmp_path / "delta.c"
    src.write_text(PLUGIN)
    tmp = tmp_path / "libdelta.so.new"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-DDELTA={delta}",
                    f"-I{REPO / 'include'}", "-o", str(tmp), str(src)], check=True)
    os.replace(tmp, tmp_path / "libdelta.so")


PYFUNC = """\
def process(block, roi):
    return block + {delta}
"""


def write_code(tmp_path, kind, delta):
    if kind == "command":
        (tmp_path / "f.py").write_text(SCRIPT.format(delta=delta))
    elif kind == "worker":
        (tmp_path / "w.py").write_text(WORKER.format(delta=delta))
    elif kind == "python":
        (tmp_path / "fn.py").write_text(PYFUNC.format(delta=delta))
    else:
        build_plugin(tmp_path, delta)


PROCESS = {"command": {"command": f"{PY} f.py"}, "worker": {"worker": f"{PY} w.py"},
           "plugin": {"plugin": "libdelta.so"}, "python": {"python": "fn.py:process"}}


@pytest.mark.parametrize("kind", ["command", "worker", "plugin", "python"])
def test_edited_processor_code_is_recomputed(tmp_path, mount, kind):
    data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
    write_code(tmp_path, kind, 1)
    task = make_task(tmp_path, data, CH, rois=ROIS, process={**PROCESS[kind], "threads": 1},
                     output={"fill_value": -1})
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data, 1))
    time.sleep(0.01)
    write_code(tmp_path, kind, 2)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data, 2))
        assert m.status()["calls"] == len(ROIS)
    with mount(task.config) as m:  # unchanged code: nothing again
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], reference(data, 2))
        assert m.status()["calls"] == 0


def processes_running(task_dir, name):
    """PIDs of the processes running in task_dir (their working directory) whose command
    line names name."""
    out = []
    for p in Path("/proc").iterdir():
        try:
            if (p.name.isdigit() and name.encode() in (p / "cmdline").read_bytes()
                    and os.readlink(p / "cwd") == str(task_dir)):
                out.append(int(p.name))
        except OSError:
            continue
    return out


def kill_and_wait(task_dir, name, timeout=10):
    """kill -9 of the processes running name in task_dir; waits until they are gone."""
    pids = processes_running(task_dir, name)
    assert pids, f"no process runs {name}"
    for pid in pids:
        os.kill(pid, 9)
    deadline = time.monotonic() + timeout
    while processes_running(task_dir, name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes_running(task_dir, name)


@pytest.mark.parametrize("kind", ["command", "worker", "python"])
def test_code_edited_while_mounted_is_never_kept_as_the_old(tmp_path, mount, kind):
    """The processor's code edited while mounted, between two ROIs: a command reads its script
    at each start; a worker and the python fork server read theirs when they start again
    (here after a kill -9). The ROI computed after the edit fails, saying why, and nothing is
    stored under the first code's identity: with the first code back, a new mount serves its
    results, never the second code's."""
    data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
    want = reference(data, 1)
    write_code(tmp_path, kind, 1)
    task = make_task(tmp_path, data, CH, rois=ROIS,
                     process={**PROCESS[kind], "threads": 1, "readahead": 0},
                     output={"fill_value": -1})
    with mount(task.config) as m:
        np.testing.assert_array_equal(chunk_of(m, "0.0"), want[:, :16])  # ROIs 0 and 1
        time.sleep(0.01)
        write_code(tmp_path, kind, 2)
        if kind != "command":  # a new worker, a new fork server: they read the file again
            kill_and_wait(task.dir, {"worker": "w.py", "python": "roifs._server"}[kind])
        try:
            read_bytes(m / "0.1")  # ROI 2
            failed = None
        except OSError as e:
            failed = e
        log = m.log_text()
    time.sleep(0.01)
    write_code(tmp_path, kind, 1)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], want)
        assert m.status()["calls"] == 1, m.status()  # ROI 2, never stored
    assert failed is not None and failed.errno == errno.EIO, failed
    code = {"command": "f.py", "worker": "w.py", "python": "fn.py"}[kind]
    assert f"/{code} changed while mounted; remount to use it" in log, log


# ---------------------------------------------------------------- check, the older layout


def test_check_reports_what_is_current(tmp_path, roifs_bin):
    task, _ = spanning_task(tmp_path)

    def cache_line():
        r = run_roifs(roifs_bin, "check", task.config)
        assert r.returncode == 0, r.stderr
        return [l for l in r.stdout.splitlines() if l.startswith("cache:")][0]

    assert cache_line() == f"cache:     {task.cache} (empty)"
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    assert cache_line().endswith("(cached: 2 of 2 chunks, 3 of 3 ROI results)")
    data = zarr.open(str(task.input), mode="r")[:]
    data[:, 16:32] += 1  # ROIs 0 and 2 read it; both chunks hold one of them
    zarr.open(str(task.input), mode="r+")[:, 16:32] = data[:, 16:32]
    assert cache_line().endswith("(cached: 0 of 2 chunks, 1 of 3 ROI results)")


def test_older_cache_layout_is_emptied(tmp_path, mount):
    task, ref = spanning_task(tmp_path)
    for sub in ("chunks", "rois", "locks"):
        (task.cache / sub).mkdir(parents=True)
    (task.cache / "manifest").write_text("roifs-cache 1\ninput elsewhere\n")
    (task.cache / "chunks" / "0").write_bytes(b"\0" * 1024)  # what layout 1 would have kept
    (task.cache / "rois" / "0").write_bytes(b"roifsR1\0" + b"\0" * 520)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert "made by an older roifs (cache layout 1); emptying it" in m.log_text()
    assert (task.cache / "format").read_text() == "roifs-cache 4\n"
    assert not (task.cache / "manifest").exists() and not (task.cache / "rois").exists()


@pytest.mark.parametrize("layout", [2, 3])
def test_cache_layout_2_is_made_again(tmp_path, roifs_bin, mount, layout):
    """Layout 2 named results by another hash, layout 3 appended every process's results to
    shared packs under byte-range locks alone and named registrations by pid alone (issue 35):
    their results and chunk files are never taken (never a wrong hit, never an error); the
    cache is emptied, logged, and made again."""
    task, ref = spanning_task(tmp_path)
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    (task.cache / "format").write_text(f"roifs-cache {layout}\n")  # as the older roifs left it
    r = run_roifs(roifs_bin, "check", task.config)
    assert "(made by an older roifs; it will be emptied at the next mount)" in r.stdout, r
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert f"made by an older roifs (cache layout {layout}); emptying it" in m.log_text()
        assert m.status()["calls"] == len(ROIS)  # every ROI computed again
    assert (task.cache / "format").read_text() == "roifs-cache 4\n"


def test_foreign_directory_is_refused(tmp_path, roifs_bin):
    task, _ = spanning_task(tmp_path)
    task.cache.mkdir()
    (task.cache / "precious.txt").write_text("keep me")
    r = run_roifs(roifs_bin, "warm", task.config)
    assert r.returncode == 2, r.stderr
    assert (f"roifs: {task.cache}: not a roifs cache directory (not empty, no roifs format "
            "marker); refusing to use it") in r.stderr, r.stderr
    assert os.listdir(task.cache) == ["precious.txt"]


def test_chunk_files_as_written_are_served_without_reading_them(tmp_path, mount, roifs_bin):
    """A cache file nobody wrote to since roifs did (same inode, same nanosecond stamp) is served
    at once, also by a fresh mount: no checksum pass over its bytes on the first open."""
    task, ref = spanning_task(tmp_path)
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    with mount(task.config, args=("-d",)) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], ref)
        assert m.status()["calls"] == 0
        log = m.log_text()
    assert "checksum of" not in log, [l for l in log.splitlines() if "checksum" in l]


def test_cached_chunk_changed_while_mounted(tmp_path, mount, roifs_bin):
    """A cache file written to while a mount serves it (after that mount verified it) is
    checked again at its next open, and made again from the stored results."""
    task, ref = spanning_task(tmp_path)
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    f = task.cache / "chunks" / "1"
    with mount(task.config) as m:
        np.testing.assert_array_equal(chunk_of(m, "0.1"), ref[:, 16:32])
        flip(f, 4 * (5 * 16 + 10))  # an element inside ROI 0
        for _ in range(2):
            np.testing.assert_array_equal(chunk_of(m, "0.1"), ref[:, 16:32])
        assert f"chunk 1: its cache file {task.cache}/chunks/1 fails its checksum" in m.log_text()
        assert m.status()["calls"] == 0  # made again from the stored results
