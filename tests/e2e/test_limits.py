"""Limits (issue 14): processors that write too much (14.3), sizes from the configuration and
the metadata that overflow or exceed what fits (14.4), metadata, configurations and ROI lists
that are not regular files or are huge (14.5), NUL bytes in the configuration and a byte order
mark in the ROI list (14.7). Bad input gives exit 2 and `roifs: FILE[:LINE]: ...` from both
`check` and `mount`, never a hang, a crash or unbounded memory; a failing ROI gives EIO and a
report in the status file while the mount goes on serving."""
import errno
import json
import math
import os
import re
import subprocess
import tempfile
import time

import numpy as np
import pytest

from conftest import PY, is_mounted, lazy_unmount, make_task, read_bytes, run_roifs

SHAPE, CHUNKS = (8, 8), (4, 8)
ROIS = [((0, 4), (0, 8)), ((4, 8), (0, 8))]  # one per chunk: 0.0 and 1.0


def small_task(tmp_path, **kw):
    data = np.arange(64, dtype="<i2").reshape(SHAPE)
    kw.setdefault("process", {"builtin": "add", "param.value": 1})
    return make_task(tmp_path, data, CHUNKS, rois=ROIS, **kw)


def assert_bad(res, path, line=None, *words):
    out = f"exit {res.returncode}\nstdout: {res.stdout}\nstderr: {res.stderr}"
    assert res.returncode == 2, out
    first = res.stderr.splitlines()[0] if res.stderr else ""
    where = re.escape(str(path)) + (f":{line}(?!\\d)" if line else r"(?!:\d)")
    assert first.startswith("roifs: ") and re.search(where, first), \
        f"the message does not start with 'roifs: ' and name {where}\n{out}"
    for w in words:
        assert w.lower() in res.stderr.lower(), f"the message does not say {w!r}\n{out}"


def check_and_mount(roifs_bin, task, path, line=None, *words, timeout=15):
    """`check` and `mount` both refuse the task, quickly, naming path (and line)."""
    t0 = time.monotonic()
    assert_bad(run_roifs(roifs_bin, "check", task.config, timeout=timeout), path, line, *words)
    task.mnt.mkdir(exist_ok=True)
    try:
        res = run_roifs(roifs_bin, "mount", task.config, task.mnt, timeout=timeout)
        assert not is_mounted(task.mnt), "a bad task got mounted"
        assert_bad(res, path, line, *words)
    finally:
        if is_mounted(task.mnt):
            lazy_unmount(task.mnt)
    assert time.monotonic() - t0 < timeout, "too slow"


def line_of(path, text):
    return next(n for n, l in enumerate(path.read_text(errors="replace").splitlines(), 1)
                if text in l)


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"test bug: {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


# ------------------------------------------------------------------- 14.3 writing too much


# ROI 0's processor never stops writing; ROI 1's copies its input.
ENDLESS = ('if [ "$ROIFS_ROI" = 0 ]; then cat >/dev/null; exec cat /dev/zero; else exec cat; fi')

WORKER = """\
import json, sys
mode = sys.argv[1]
inp, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    line = inp.readline()
    if not line:
        break
    rq = json.loads(line)
    data = inp.read(rq["nbytes"])
    if rq["roi"] != 0:
        out.write(json.dumps({"ok": True, "nbytes": len(data)}).encode() + b"\\n" + data)
        out.flush()
    elif mode == "announce":  # a reply far larger than the read region
        out.write(json.dumps({"ok": True, "nbytes": 10 ** 15}).encode() + b"\\n")
        out.flush()
    else:  # the right header, then bytes without end
        out.write(json.dumps({"ok": True, "nbytes": len(data)}).encode() + b"\\n")
        while True:
            out.write(bytes(65536))
"""


def expect_eio_soon(path, within=20):
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        read_bytes(path)
    assert e.value.errno == errno.EIO, f"expected EIO, got {e.value!r}"
    assert time.monotonic() - t0 < within, f"EIO only after {time.monotonic() - t0:.1f} s"


def roi0_errors(m):
    return [e["message"] for e in m.status()["errors"] if e.get("roi") == 0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["command", "worker-announce", "worker-send"])
def test_processor_writing_too_much_fails_its_roi(tmp_path, mount, kind):
    if kind == "command":
        process = {"command": ENDLESS}
    else:
        (tmp_path / "w.py").write_text(WORKER)
        process = {"worker": f"exec {PY} w.py {kind.split('-')[1]}"}
    task = small_task(tmp_path, process={**process, "threads": 2, "timeout": 0,
                                         "readahead": 0})
    with mount(task.config) as m:
        expect_eio_soon(m / "0.0")
        errors = roi0_errors(m)
        assert errors, m.status()
        want = {"command": "more than the 64 bytes expected",
                "worker-announce": "nbytes 1000000000000000, expected 64",
                "worker-send": "sent more than the 64 bytes"}[kind]
        assert want in errors[-1], errors
        assert m.status()["rois"]["failed"] == 1
        # the mount goes on serving
        assert read_bytes(m / "1.0") == np.arange(32, 64, dtype="<i2").tobytes()
        expect_eio_soon(m / "0.0")  # tried again, failed again at once
    # nothing goes on writing after the unmount (processors run in the task's directory)
    assert not processes_in(tmp_path), processes_in(tmp_path)


def processes_in(directory):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(directory):
                found.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" "))
        except OSError:
            pass
    return found


# ------------------------------------------------------------------- 14.4 sizes


@pytest.mark.parametrize("chunks", ["1099511627776,1099511627776", "2147483648,2147483648",
                                    "65536,65536"])
def test_huge_output_chunks_refused(tmp_path, roifs_bin, chunks):
    task = small_task(tmp_path, output={"chunks": chunks})
    check_and_mount(roifs_bin, task, task.config, line_of(task.config, "chunks ="),
                    "[output] chunks", "2 GiB")


def test_output_dtype_that_makes_input_chunks_too_large(tmp_path, roifs_bin):
    # input chunks of 1.5 GiB (|u1) are fine; as <f8 they would be 12 GiB
    task = small_task(tmp_path, output={"dtype": "<f8"})
    z = task.input / ".zarray"
    meta = json.loads(z.read_text())
    meta.update(shape=[3 << 30], chunks=[3 << 29], dtype="|u1")
    z.write_text(json.dumps(meta))
    task.rois_file.write_text("0:10\n")
    check_and_mount(roifs_bin, task, task.config, line_of(task.config, "dtype ="),
                    "[output] dtype", "2 GiB")


def huge_input(task, shape, chunks):
    z = task.input / ".zarray"
    meta = json.loads(z.read_text())
    meta.update(shape=shape, chunks=chunks)
    z.write_text(json.dumps(meta))


@pytest.mark.parametrize("roi", ["0:1099511627776, 0:1099511627776", "0:1048576, 0:1048576",
                                 ":, :"])
def test_huge_roi_refused(tmp_path, roifs_bin, roi):
    task = small_task(tmp_path)
    huge_input(task, [1 << 40, 1 << 40], [1024, 1024])
    task.rois_file.write_text(f"0:4, 0:4\n{roi}\n")
    check_and_mount(roifs_bin, task, task.config, line_of(task.config, "file ="),
                    "[rois] file", "ROI 1", "memory")


def test_huge_halo_refused(tmp_path, roifs_bin):
    task = small_task(tmp_path, sections={"rois": {"halo": "1099511627776,1099511627776"}})
    huge_input(task, [1 << 40, 1 << 40], [1024, 1024])
    task.rois_file.write_text("0:4, 0:8\n")
    check_and_mount(roifs_bin, task, task.config, line_of(task.config, "halo ="),
                    "[rois] halo", "memory")


def memory_bytes():
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) * 1024


def test_too_many_roi_chunk_contacts_refused(tmp_path, roifs_bin):
    # A ROI that fits in memory (6 bytes an element: in, out and its box, of <i2), over chunks
    # of one element: its index (two arrays of 16 bytes a chunk) would not fit.
    side = math.isqrt(memory_bytes() // 16) + 1
    task = small_task(tmp_path, output={"chunks": "1,1"})
    huge_input(task, [1 << 20, 1 << 20], [1024, 1024])
    task.rois_file.write_text(f"0:{side}, 0:{side}\n")
    check_and_mount(roifs_bin, task, task.config, line_of(task.config, "chunks ="),
                    "[output] chunks")


@pytest.mark.parametrize("fmt", [2, 3])
def test_absurd_input_chunks_refused(tmp_path, roifs_bin, fmt):
    task = small_task(tmp_path)
    if fmt == 2:
        meta_file = task.input / ".zarray"
        huge_input(task, [64, 64], [1 << 40, 1 << 40])
    else:
        for f in task.input.iterdir():
            f.unlink()
        meta_file = task.input / "zarr.json"
        meta_file.write_text(json.dumps({
            "zarr_format": 3, "node_type": "array", "shape": [64, 64], "data_type": "int16",
            "chunk_grid": {"name": "regular",
                           "configuration": {"chunk_shape": [1 << 40, 1 << 40]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}))
    check_and_mount(roifs_bin, task, meta_file, None, "chunk")


# ------------------------------------------------------------------- 14.5 what files are read


def fifo(path):
    if path.exists():
        path.unlink()
    os.mkfifo(path)


def to_dev_zero(path):
    if path.exists():
        path.unlink()
    path.symlink_to("/dev/zero")


def sparse(path, size=1 << 40):
    with open(path, "wb") as f:
        f.truncate(size)


def ome_image(tmp_path):
    """A minimal OME-Zarr image (dataset 0, axes y x) with a CSV ROI table tables/t."""
    task = small_task(tmp_path)
    image = tmp_path / "img.zarr"
    image.mkdir()
    os.rename(task.input, image / "0")
    (image / ".zgroup").write_text('{"zarr_format": 2}')
    (image / ".zattrs").write_text(json.dumps({"multiscales": [{
        "version": "0.4", "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 1.0]}]}]}]}))
    table = image / "tables" / "t"
    table.mkdir(parents=True)
    (table / ".zattrs").write_text('{"backend": "csv", "type": "roi_table"}')
    (table / "table.csv").write_text(
        "FieldIndex,x_micrometer,y_micrometer,z_micrometer,len_x_micrometer,len_y_micrometer,"
        "len_z_micrometer\nFOV_1,0,0,0,8,4,1\n")
    edit(task.config, "path = in.zarr", "path = img.zarr")
    edit(task.config, "file = rois.txt", "table = img.zarr/tables/t")
    return task, image


def test_ome_image_with_table_is_valid(tmp_path, roifs_bin):
    """Guards the table cases below: the image and its table as built are accepted."""
    task, _ = ome_image(tmp_path)
    res = run_roifs(roifs_bin, "check", task.config)
    assert res.returncode == 0, res.stderr


def target(tmp_path, which):
    """(task, the file to break, the key's line when the message names the configuration)."""
    if which in ("image .zattrs", "table .zattrs", "table.csv"):
        task, image = ome_image(tmp_path)
        path = {"image .zattrs": image / ".zattrs", "table .zattrs": image / "tables/t/.zattrs",
                "table.csv": image / "tables/t/table.csv"}[which]
        return task, path
    task = small_task(tmp_path, attrs={"a": 1})
    path = {"config": task.config, "rois": task.rois_file, ".zarray": task.input / ".zarray",
            ".zattrs": task.input / ".zattrs"}[which]
    return task, path


FILES = ["config", "rois", ".zarray", ".zattrs", "image .zattrs", "table .zattrs", "table.csv"]


@pytest.mark.parametrize("which", FILES)
def test_fifo_refused_without_hanging(tmp_path, roifs_bin, which):
    task, path = target(tmp_path, which)
    fifo(path)
    check_and_mount(roifs_bin, task, path, None, "not a regular file")


@pytest.mark.parametrize("which", FILES)
def test_link_to_dev_zero_refused(tmp_path, roifs_bin, which):
    task, path = target(tmp_path, which)
    to_dev_zero(path)
    if which == "rois":  # the list is read through its link: named by the key that names it
        check_and_mount(roifs_bin, task, task.config, line_of(task.config, "file ="),
                        "[rois] file", "/dev/zero", "not a regular file")
    else:
        check_and_mount(roifs_bin, task, path, None, "not a regular file")


@pytest.mark.parametrize("which", ["config", ".zarray", ".zattrs", "image .zattrs",
                                   "table.csv"])
def test_huge_metadata_refused(tmp_path, roifs_bin, which):
    task, path = target(tmp_path, which)
    sparse(path)  # 1 TiB of zeros that take no room
    check_and_mount(roifs_bin, task, path, None, "too large")


# Runs argv in a child of a small interpreter and reports the child's peak RSS: a process
# started by pytest itself (vfork) would be charged pytest's own peak at its exec.
RSS_SHIM = """\
import os, sys
pid = os.fork()
if pid == 0:
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stdout.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def max_rss_of(argv, timeout=60):
    """Runs argv; returns (exit status, stderr, its peak RSS in bytes)."""
    r = subprocess.run([PY, "-c", RSS_SHIM, *map(str, argv)], capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return r.returncode, r.stderr, int(r.stdout)


def test_large_roi_list_is_streamed(tmp_path, roifs_bin):
    # 200 MiB of comments around two ROIs: accepted, in bounded memory
    task = small_task(tmp_path)
    comment = b"#" + b"x" * 1022 + b"\n"
    with open(task.rois_file, "wb") as f:
        f.write(b"0:4, 0:8\n")
        for _ in range(200):
            f.write(comment * 1024)
        f.write(b"4:8, 0:8\n")
    rc, err, rss = max_rss_of([roifs_bin, "check", str(task.config)])
    assert rc == 0, err
    assert rss < 100 << 20, f"check of a 200 MiB ROI list peaked at {rss >> 20} MiB"


def test_roi_list_line_without_end_refused(tmp_path, roifs_bin):
    task = small_task(tmp_path)
    with open(task.rois_file, "wb") as f:
        f.write(b"0:4, 0:8\n" + b"1" * (10 << 20))
    check_and_mount(roifs_bin, task, task.rois_file, 2, "line longer")


def test_sparse_roi_list_refused_fast(tmp_path, roifs_bin):
    task = small_task(tmp_path)
    sparse(task.rois_file)
    check_and_mount(roifs_bin, task, task.rois_file, 1, "NUL")


# ------------------------------------------------------------------- 14.7 NUL bytes, BOM


@pytest.mark.parametrize("old,new", [("builtin = add", "builtin = add\0junk"),
                                     ("builtin = add", "command = /bin/cat\0; rm -rf /")])
def test_nul_in_configuration_refused(tmp_path, roifs_bin, old, new):
    task = small_task(tmp_path)
    text = task.config.read_text()
    task.config.write_bytes(text.replace(old, new).encode())
    line = text[: text.index(old)].count("\n") + 1
    check_and_mount(roifs_bin, task, task.config, line, "NUL")


def test_nul_on_a_later_line_named(tmp_path, roifs_bin):
    task = small_task(tmp_path)
    task.config.write_bytes(task.config.read_bytes() + b"\n; comment\0\n")
    lines = task.config.read_bytes().split(b"\n")
    line = next(n for n, l in enumerate(lines, 1) if b"\0" in l)
    check_and_mount(roifs_bin, task, task.config, line, "NUL")


def test_bom_in_roi_list_accepted(tmp_path, roifs_bin, mount):
    task = small_task(tmp_path)
    task.rois_file.write_bytes(b"\xef\xbb\xbf" + task.rois_file.read_bytes())
    res = run_roifs(roifs_bin, "check", task.config)
    assert res.returncode == 0, res.stderr
    assert re.search(r"rois:\s+2\b", res.stdout), res.stdout
    with mount(task.config) as m:
        assert read_bytes(m / "0.0") == (np.arange(32, dtype="<i2") + 1).tobytes()
