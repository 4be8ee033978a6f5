"""Operating roifs (docs/operations.md): warm (progress, failures, interrupt and resume, next to a
mount), export (a plain Zarr array, resumable), status, clean, unmount of a dead mount, logging,
the mount(8)/fstab form through mount.fuse3, and the man page."""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import (REPO, is_mounted, lazy_unmount, make_task, mountinfo_entry, read_bytes,
                      read_status, run_on_terminal, run_roifs, wait_for)

# Copies its input (so out = in inside the ROIs) and records "start R" and "end R" in the file
# param.counter names; sleeps param.sleep seconds; ROI param.fail fails with a message.
COUNTING = r"""#!/bin/sh
echo "start $ROIFS_ROI" >> "$ROIFS_PARAM_COUNTER"
if [ "$ROIFS_ROI" = "$ROIFS_PARAM_FAIL" ]; then
    echo "some context on stderr" >&2
    echo "boom: roi $ROIFS_ROI failed on purpose" >&2
    exit 3
fi
sleep "$ROIFS_PARAM_SLEEP"
cat
echo "end $ROIFS_ROI" >> "$ROIFS_PARAM_COUNTER"
"""

SHAPE, CHUNKS = (60, 40), (10, 20)
# Overlapping ROIs, each spanning two to four chunks; rows 50-59 are touched by none.
ROIS = [((8 * i, 8 * i + 10), (0, 40)) for i in range(6)]


def counting_task(tmp_path, *, sleep=0.2, fail=-1, threads=2, output=None, rois=ROIS,
                  process=None):
    script, counter = tmp_path / "count.sh", tmp_path / "counter"
    script.write_text(COUNTING)
    data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE) + 1
    task = make_task(tmp_path, data, CHUNKS, rois=rois,
                     process={"command": f"sh {script}", "threads": threads,
                              "param.counter": counter, "param.sleep": sleep,
                              "param.fail": fail, **(process or {})},
                     output=output or {"compressor": "zlib"})
    task.counter = counter
    want = np.zeros(SHAPE, "<i4")
    for r in rois:
        sl = tuple(slice(a, b) for a, b in r)
        want[sl] = data[sl]
    task.want = want
    return task


def events(counter, kind):
    """ROI indices of the 'start' or 'end' lines of counter, in order."""
    if not counter.exists():
        return []
    return [int(l.split()[1]) for l in counter.read_text().splitlines()
            if l.startswith(kind + " ")]


@contextlib.contextmanager
def background_roifs(roifs_bin, *args, cwd="/"):
    """roifs ARGS in the background; yields (Popen, stderr path); kills it if left running."""
    with tempfile.NamedTemporaryFile("w+b", delete=False) as f:
        errf = Path(f.name)
    with open(errf, "wb") as err:
        p = subprocess.Popen([roifs_bin, *map(str, args)], stdout=subprocess.DEVNULL,
                             stderr=err, stdin=subprocess.DEVNULL, cwd=cwd)
    try:
        yield p, errf
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        errf.unlink(missing_ok=True)


def cached_chunks(task):
    return sorted(os.listdir(task.cache / "chunks")) if (task.cache / "chunks").exists() else []


# ---------------------------------------------------------------- warm


def test_warm_computes_everything_once(tmp_path, roifs_bin, mount):
    task = counting_task(tmp_path, sleep=0.05)
    r = run_roifs(roifs_bin, "warm", task.config)
    assert r.returncode == 0, r.stderr
    # Not a terminal: plain lines, the last one a summary.
    assert "\r" not in r.stderr
    assert re.search(r"warm: 10 of 10 chunks done after [\d.]+s; 6 ROIs computed", r.stderr), r.stderr
    assert sorted(events(task.counter, "end")) == list(range(len(ROIS)))
    assert len(cached_chunks(task)) == 10

    r = run_roifs(roifs_bin, "warm", task.config)  # nothing left to do
    assert r.returncode == 0 and "0 ROIs computed" in r.stderr, r.stderr
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], task.want)
        assert m.status()["calls"] == 0
    assert len(events(task.counter, "start")) == len(ROIS)


def test_warm_progress_bar_on_a_terminal(tmp_path, roifs_bin):
    task = counting_task(tmp_path, sleep=0.25, threads=1, rois=ROIS[:4])
    rc, text = run_on_terminal([roifs_bin, "warm", str(task.config)], 20)
    assert rc == 0, text
    bars = re.findall(r"\rroifs: warm \[([#.]{24})\] +(\d+)% (\d+)/4 ROIs", text)
    assert len(bars) >= 3, text  # redrawn in place about five times a second
    assert bars[-1][0] == "#" * 24 and bars[-1][1] == "100", text
    assert [int(b[2]) for b in bars] == sorted(int(b[2]) for b in bars), text
    assert re.search(r"ROIs/s", text) and re.search(r"\ds left", text), text
    assert text.count("\n") == 2, text  # one bar line, then the summary


def test_warm_names_failed_rois(tmp_path, roifs_bin):
    # Its input just written: hashed again at every look (the racy rule of docs/design.md),
    # so a chunk's open may still be looking when ROI 2 fails; it gets the failure rather
    # than a second run (test_engine_fail.c holds that interleaving deterministically).
    task = counting_task(tmp_path, sleep=0, fail=2)
    r = run_roifs(roifs_bin, "warm", task.config)
    assert r.returncode == 1, r.stderr
    assert re.search(r"^roifs: roi 2 \[16:26, 0:40\] failed: exit status 3: "
                     r"boom: roi 2 failed on purpose$", r.stderr, re.M), r.stderr
    assert re.search(r"^roifs: warm: \d+ of 10 chunks failed", r.stderr, re.M), r.stderr
    # ROI 2 spans three chunks, yet one warm tries it once.
    assert events(task.counter, "start").count(2) == 1
    assert sorted(events(task.counter, "end")) == [0, 1, 3, 4, 5]


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_warm_interrupted_then_resumed(tmp_path, roifs_bin, sig, status):
    task = counting_task(tmp_path, sleep=0.5, threads=2)
    with background_roifs(roifs_bin, "warm", task.config) as (p, errf):
        # Stop in the middle of the second round, well away from any ROI's end.
        wait_for(lambda: len(events(task.counter, "end")) >= 2, what="two ROIs")
        time.sleep(0.15)
        p.send_signal(sig)
        assert p.wait(10) == status, errf.read_text()
        err = errf.read_text()
    assert "roifs: interrupted; run the same command again to resume" in err, err
    done_first = set(events(task.counter, "end"))
    started_first = len(events(task.counter, "start"))
    assert 2 <= len(done_first) < len(ROIS)

    r = run_roifs(roifs_bin, "warm", task.config)
    assert r.returncode == 0, r.stderr
    started_second = events(task.counter, "start")[started_first:]
    assert started_second, "the second warm computed nothing"
    assert not done_first & set(started_second), \
        f"finished ROIs {done_first} ran again: {started_second}"
    assert sorted(done_first | set(events(task.counter, "end"))) == list(range(len(ROIS)))
    assert len(cached_chunks(task)) == 10


def test_warm_next_to_a_reading_mount(tmp_path, roifs_bin, mount):
    task = counting_task(tmp_path, sleep=0.2, threads=2)
    with mount(task.config) as m:
        with background_roifs(roifs_bin, "warm", task.config) as (p, errf):
            got = zarr.open(str(m.path), mode="r")[:]
            assert p.wait(30) == 0, errf.read_text()
        np.testing.assert_array_equal(got, task.want)
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], task.want)
    starts = events(task.counter, "start")
    assert sorted(starts) == list(range(len(ROIS))), f"each ROI must run once in all: {starts}"


def test_warm_usage(tmp_path, roifs_bin):
    task = counting_task(tmp_path)
    for args in (["warm"], ["warm", "-j", "0", task.config], ["warm", "-j", "x", task.config],
                 ["warm", task.config, "extra"], ["export", task.config],
                 ["export", "-j", "0", task.config, tmp_path / "out"]):
        r = run_roifs(roifs_bin, *args)
        assert r.returncode == 2 and r.stderr.startswith("roifs: "), (args, r.stderr)


# ---------------------------------------------------------------- options: one syntax


@pytest.mark.parametrize("jobs", [["-j4"], ["-j", "4"], ["--jobs=4"], ["--jobs", "4"],
                                  ["--j=4"]])
def test_jobs_in_every_spelling(tmp_path, roifs_bin, jobs):
    """-j N is getopt_long's: joined or not, long with = or not, abbreviated, and after the
    operand as well as before."""
    task = counting_task(tmp_path, sleep=0)
    r = run_roifs(roifs_bin, "warm", *jobs, task.config)
    assert r.returncode == 0, r.stderr
    assert sorted(events(task.counter, "end")) == list(range(len(ROIS)))
    r = run_roifs(roifs_bin, "warm", task.config, *jobs)
    assert r.returncode == 0 and "0 ROIs computed" in r.stderr, r.stderr
    dest = tmp_path / "out"
    r = run_roifs(roifs_bin, "export", *jobs, task.config, dest)
    assert r.returncode == 0 and "10 kept" not in r.stderr, r.stderr
    np.testing.assert_array_equal(zarr.open(str(dest), mode="r")[:], task.want)


def test_double_dash_ends_the_options(tmp_path, roifs_bin):
    """A configuration whose name starts with '-' is named after "--"; without it, it is an
    unknown option (exit 2)."""
    task = counting_task(tmp_path, sleep=0)
    shutil.copy(task.config, tmp_path / "-odd.ini")
    r = run_roifs(roifs_bin, "warm", "-odd.ini", cwd=tmp_path)
    assert r.returncode == 2 and "unknown option '-o'" in r.stderr, r.stderr
    r = run_roifs(roifs_bin, "check", "--", "-odd.ini", cwd=tmp_path)
    assert r.returncode == 0 and "rois:      6" in r.stdout, r.stdout + r.stderr
    r = run_roifs(roifs_bin, "warm", "--jobs", "2", "--", "-odd.ini", cwd=tmp_path)
    assert r.returncode == 0 and "6 ROIs computed" in r.stderr, r.stderr
    r = run_roifs(roifs_bin, "export", "-j2", "--", "-odd.ini", "-out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(zarr.open(str(tmp_path / "-out"), mode="r")[:], task.want)
    r = run_roifs(roifs_bin, "clean", "--unused", "--", "-odd.ini", cwd=tmp_path)
    assert r.returncode == 0 and "cleaned" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("cmd", ["mount", "unmount", "check", "warm", "export", "status",
                                 "apply", "clean"])
def test_unknown_option_is_named(tmp_path, roifs_bin, cmd):
    for bad, named in (("--bogus", "'--bogus'"), ("-Z", "'-Z'")):
        r = run_roifs(roifs_bin, cmd, bad, tmp_path / "x.ini")
        assert r.returncode == 2, (bad, r.stderr)
        assert r.stderr.startswith(f"roifs: {cmd}: unknown option {named}"), r.stderr


@pytest.mark.parametrize("args,says", [
    (["warm", "-j"], "option '-j' needs a value"),
    (["warm", "x.ini", "--jobs"], "option '--jobs' needs a value"),
    (["warm", "--jobs=0", "x.ini"], "-j needs a number of threads from 1 to 1024, not '0'"),
    (["apply", "--again=yes", "x.ini"], "option '--again=yes' takes no value"),
    (["export", "--into", "x.ini"], "export --into needs IMAGE and CONFIG"),
    (["clean", "--unused"], "clean needs exactly one CONFIG"),
    (["mount", "-o"], "option '-o' needs a value"),
    (["warm", "--into=img", "x.ini"], "unknown option '--into=img'"),
])
def test_bad_option_values(roifs_bin, args, says):
    r = run_roifs(roifs_bin, *args)
    assert r.returncode == 2 and r.stderr.startswith("roifs: ") and says in r.stderr, r.stderr


# ---------------------------------------------------------------- export


def test_export_is_a_plain_zarr_array(tmp_path, roifs_bin, mount):
    task = counting_task(tmp_path, sleep=0,
                         output={"compressor": "blosc", "dimension_separator": "/"})
    dest = tmp_path / "exported"
    r = run_roifs(roifs_bin, "export", "-j", "2", task.config, dest)
    assert r.returncode == 0, r.stderr
    assert (dest / ".roifs-export").read_text().startswith("roifs-export 1\n")
    assert not [p for p in dest.rglob(".roifs-tmp.*")]
    exported = zarr.open(str(dest), mode="r")
    np.testing.assert_array_equal(exported[:], task.want)
    # Nested folders for "/", no file for the chunks no ROI touches (rows 50-59).
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()
                  and not p.name.startswith(".")) == [f"{i}/{j}" for i in range(5)
                                                      for j in range(2)]
    with mount(task.config) as m:
        np.testing.assert_array_equal(exported[:], zarr.open(str(m.path), mode="r")[:])
        for name in (".zarray", "0/0", "4/1"):
            assert (dest / name).read_bytes() == read_bytes(m / name), name
        # the same attributes, byte for byte: they depend only on the job, not on what the
        # export or the mount found cached when it started
        assert (dest / ".zattrs").read_bytes() == read_bytes(m / ".zattrs")
        assert m.status()["results"]["cached_at_start"] == len(ROIS)
    assert sorted(events(task.counter, "start")) == list(range(len(ROIS)))

    r = run_roifs(roifs_bin, "export", task.config, dest)  # again: everything is kept
    assert r.returncode == 0 and "0 chunk files written, 10 kept" in r.stderr, r.stderr


def test_export_resumes_after_an_interrupt(tmp_path, roifs_bin):
    task = counting_task(tmp_path, sleep=0.6, threads=2)
    dest = tmp_path / "out"
    with background_roifs(roifs_bin, "export", task.config, dest) as (p, errf):
        wait_for(lambda: any(dest.glob("[0-9].[0-9]")), what="a first chunk file")
        wait_for(lambda: len(events(task.counter, "end")) >= 3, what="three ROIs")
        time.sleep(0.15)
        p.send_signal(signal.SIGINT)
        assert p.wait(10) == 130, errf.read_text()
    assert not (dest / ".zarray").exists(), "metadata of an unfinished export"
    first = {f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in dest.glob("[0-9].[0-9]")}
    assert 0 < len(first) < 10
    done_first = set(events(task.counter, "end"))
    nstart = len(events(task.counter, "start"))

    r = run_roifs(roifs_bin, "export", task.config, dest)
    assert r.returncode == 0, r.stderr
    assert f"{10 - len(first)} chunk files written, {len(first)} kept" in r.stderr, r.stderr
    for name, ident in first.items():
        f = dest / name
        assert (f.stat().st_ino, f.stat().st_mtime_ns) == ident, f"{name} was written again"
    assert not done_first & set(events(task.counter, "start")[nstart:])
    np.testing.assert_array_equal(zarr.open(str(dest), mode="r")[:], task.want)


def test_export_refuses_a_foreign_destination(tmp_path, roifs_bin):
    task = counting_task(tmp_path, sleep=0)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "precious.txt").write_text("keep me")
    r = run_roifs(roifs_bin, "export", task.config, busy)
    assert r.returncode == 2 and "not empty" in r.stderr, r.stderr
    assert os.listdir(busy) == ["precious.txt"]

    afile = tmp_path / "afile"
    afile.write_text("x")
    r = run_roifs(roifs_bin, "export", task.config, afile)
    assert r.returncode == 2 and "not a directory" in r.stderr, r.stderr

    other = tmp_path / "other"
    r = run_roifs(roifs_bin, "export", task.config, other)
    assert r.returncode == 0, r.stderr
    (task.rois_file).write_text("0:10, 0:40\n")  # another ROI list: another result
    r = run_roifs(roifs_bin, "export", task.config, other)
    assert r.returncode == 2 and "another configuration" in r.stderr, r.stderr


def test_export_fails_naming_the_roi(tmp_path, roifs_bin):
    task = counting_task(tmp_path, sleep=0, fail=1)
    dest = tmp_path / "out"
    r = run_roifs(roifs_bin, "export", task.config, dest)
    assert r.returncode == 1, r.stderr
    assert re.search(r"^roifs: roi 1 \[8:18, 0:40\] failed: exit status 3: boom", r.stderr,
                     re.M), r.stderr
    assert not (dest / ".zarray").exists()
    assert (dest / "3.0").exists()  # the chunks that could be made are there


# ---------------------------------------------------------------- status, clean, unmount


def test_status_summary(tmp_path, roifs_bin, mount):
    task = counting_task(tmp_path, sleep=0, fail=3)
    with mount(task.config) as m:
        read_bytes(m / "0.0")
        with pytest.raises(OSError):
            read_bytes(m / "3.0")  # ROI 3 fails
        st = read_status(m.path)
        assert isinstance(st["uptime"], (int, float)) and 0 < st["uptime"] < 60, st
        r = run_roifs(roifs_bin, "status", m.path)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        total, done = st["rois"]["total"], st["rois"]["done"]
        assert re.search(rf"ROIs:\s+\d+ of {total} done \(\d+%\).*\b1 failed", out), out
        assert re.search(r"rate:\s+[\d.]+ ROIs/s since the mount", out), out
        assert re.search(r"roi 3: exit status 3: boom: roi 3 failed on purpose", out), out
        assert done >= 2

    r = run_roifs(roifs_bin, "status", tmp_path)
    assert r.returncode == 1 and "not a roifs mount" in r.stderr, r.stderr
    r = run_roifs(roifs_bin, "status", tmp_path / "nowhere")
    assert r.returncode == 1 and r.stderr.startswith("roifs: "), r.stderr


def test_retry_after_holds_a_failed_roi(tmp_path, roifs_bin, mount):
    task = counting_task(tmp_path, sleep=0, fail=3, process={"retry_after": 3})
    r = run_roifs(roifs_bin, "check", task.config)
    assert "failures:  retries 0, retry_after 3 s" in r.stdout, r.stdout
    with mount(task.config) as m:
        t0 = time.time()
        for name in ("3.0", "2.1"):  # both need ROI 3 (rows 24:34)
            with pytest.raises(OSError):
                read_bytes(m / name)
        assert events(task.counter, "start").count(3) == 1
        st = read_status(m.path)
        (er,) = [e for e in st["errors"] if e["roi"] == 3]
        assert t0 + 2.5 < er["retry_at"] < time.time() + 3.1, (t0, er)
        r = run_roifs(roifs_bin, "status", m.path)
        assert re.search(r"roi 3: .*\n    not tried again before \d\d:\d\d:\d\d \(in [\d.]+s\): "
                         r"\[process\] retry_after", r.stdout), r.stdout
        assert time.time() < er["retry_at"], "too slow to tell: the reads took 3 s"
        time.sleep(er["retry_at"] - time.time() + 0.1)
        with pytest.raises(OSError):
            read_bytes(m / "3.1")
        assert events(task.counter, "start").count(3) == 2
        (er2,) = [e for e in read_status(m.path)["errors"] if e["roi"] == 3 and "retry_at" in e]
        assert er2["retry_at"] > er["retry_at"] + 2.9


def test_clean(tmp_path, roifs_bin):
    task = counting_task(tmp_path, sleep=0)
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    assert task.cache.is_dir()
    r = run_roifs(roifs_bin, "clean", task.config)
    assert r.returncode == 0 and not task.cache.exists(), r.stdout + r.stderr
    r = run_roifs(roifs_bin, "clean", task.config)  # nothing there: fine
    assert r.returncode == 0, r.stderr

    task.cache.mkdir()
    (task.cache / "thesis.tex").write_text("not a cache")
    r = run_roifs(roifs_bin, "clean", task.config)
    assert r.returncode == 1 and "not a roifs cache" in r.stderr, r.stderr
    assert (task.cache / "thesis.tex").exists()


def test_unmount_clears_a_dead_mount(tmp_path, roifs_bin):
    task = counting_task(tmp_path, sleep=0)
    task.mnt.mkdir()
    p = subprocess.Popen([roifs_bin, "mount", "-f", str(task.config), str(task.mnt)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: is_mounted(task.mnt), what="the mount")
        assert read_bytes(task.mnt / ".zarray")
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        with pytest.raises(OSError):
            os.listdir(task.mnt)  # "Transport endpoint is not connected"
        r = run_roifs(roifs_bin, "status", task.mnt)
        assert r.returncode == 1 and "unmount" in r.stderr, r.stderr
        r = run_roifs(roifs_bin, "unmount", task.mnt)
        assert r.returncode == 0, r.stderr
        assert not is_mounted(task.mnt)
        assert os.listdir(task.mnt) == []
        r = run_roifs(roifs_bin, "unmount", task.mnt)
        assert r.returncode == 1 and "not a mount point" in r.stderr, r.stderr
    finally:
        if p.poll() is None:
            p.kill()
        if is_mounted(task.mnt):
            lazy_unmount(task.mnt)


def test_unmount_leaves_other_file_systems_alone(tmp_path, roifs_bin):
    other = tmp_path / "tmpfs"
    other.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(other)], check=True)
    try:
        r = run_roifs(roifs_bin, "unmount", other)
        assert r.returncode == 1 and "not a roifs mount" in r.stderr, r.stderr
        assert is_mounted(other)
    finally:
        subprocess.run(["umount", str(other)], check=False)


# ---------------------------------------------------------------- logging


def test_debug_log_traces_requests(tmp_path, mount):
    task = counting_task(tmp_path, sleep=0)
    with mount(task.config, args=("-d",)) as m:
        read_bytes(m / "1.1")
        log = m.log_text()
    assert re.search(r"debug: lookup \d+/1\.1: ok", log), log
    assert re.search(r"debug: open chunk \d+: ok", log), log


def test_roi_failure_is_logged_once_with_box_and_stderr(tmp_path, mount):
    task = counting_task(tmp_path, sleep=0, fail=4)
    log = tmp_path / "roifs.log"
    with open(task.config, "a") as f:
        f.write(f"\n[mount]\nlog = {log}\n")
    with mount(task.config) as m:
        with pytest.raises(OSError):
            read_bytes(m / "4.0")
    text = log.read_text()
    failed = re.findall(r"error: roi 4 \[32:42,0:40\] failed: exit status 3: "
                        r"boom: roi 4 failed on purpose", text)
    assert len(failed) == 1, text
    assert re.search(r"roi 4: stderr of the command:\nsome context on stderr\n"
                     r"boom: roi 4 failed on purpose", text), text


# ---------------------------------------------------------------- mount(8) and fstab

STD_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]


@pytest.fixture
def roifs_on_std_path(roifs_bin):
    """mount(8) runs mount.fuse3 with a fixed PATH, where mount.fuse3 finds `roifs`: for the
    test, /usr/local/sbin/roifs links to the binary under test (unless that is there)."""
    if not shutil.which("mount.fuse3"):
        pytest.skip("mount.fuse3 (Debian package fuse3) is not installed")
    link = Path("/usr/local/sbin/roifs")
    for d in STD_PATH:
        found = Path(d) / "roifs"
        if found == link and found.is_symlink():
            break  # ours, left behind by a killed run: replaced below
        if found.exists():
            if os.path.samefile(found, roifs_bin):
                yield
                return
            pytest.skip(f"another roifs is installed at {found}")
    link.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    link.symlink_to(os.path.realpath(roifs_bin))
    try:
        yield
    finally:
        link.unlink(missing_ok=True)


def mount_info(mnt):
    """[type, source, superblock options] of the mount at mnt, or None."""
    entry = mountinfo_entry(mnt)
    return entry[1] if entry else None


@contextlib.contextmanager
def unmounting(roifs_bin, mnt):
    try:
        yield
    finally:
        if is_mounted(mnt):
            r = run_roifs(roifs_bin, "unmount", mnt)
            if r.returncode != 0 or is_mounted(mnt):
                lazy_unmount(mnt)


def check_mount(mnt, want):
    fstype, source, opts = mount_info(mnt)
    assert fstype == "fuse.roifs" and source == "roifs", (fstype, source)
    np.testing.assert_array_equal(zarr.open(str(mnt), mode="r")[:], want)
    return opts.split(",")


def test_mount_8(tmp_path, roifs_bin, roifs_on_std_path):
    task = counting_task(tmp_path, sleep=0)
    task.mnt.mkdir()
    with unmounting(roifs_bin, task.mnt):
        r = subprocess.run(["mount", "-t", "fuse.roifs", str(task.config), str(task.mnt),
                            "-o", "allow_other,x-roifs-test=1,_netdev,nofail"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert "allow_other" in check_mount(task.mnt, task.want)
        assert run_roifs(roifs_bin, "status", task.mnt).returncode == 0
    assert not is_mounted(task.mnt)


def test_fstab(tmp_path, roifs_bin, roifs_on_std_path):
    task = counting_task(tmp_path, sleep=0)
    task.mnt.mkdir()
    fstab = tmp_path / "fstab"
    fstab.write_text(f"# roifs\n{task.config} {task.mnt} fuse.roifs "
                     "defaults,noauto,user,allow_other,comment=x 0 0\n")
    with unmounting(roifs_bin, task.mnt):
        r = subprocess.run(["mount", "-T", str(fstab), str(task.mnt)], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        check_mount(task.mnt, task.want)
    assert not is_mounted(task.mnt)


def test_mount_options_through_the_table(tmp_path, roifs_bin):
    """roifs mount's -o lists (joined, repeated, long form) go through fuse_opt_parse: mount(8)'s
    options are dropped, FUSE's reach the kernel, an unknown one is refused by FUSE."""
    task = counting_task(tmp_path, sleep=0)
    task.mnt.mkdir()
    with unmounting(roifs_bin, task.mnt):
        r = run_roifs(roifs_bin, "mount", "-oallow_other,ro", "--options=nodev,x-a=b,comment=c",
                      "-o", "user,defaults", task.config, task.mnt)
        assert r.returncode == 0, r.stderr
        opts = check_mount(task.mnt, task.want)
        assert "allow_other" in opts and "ro" in opts, opts
        r = run_roifs(roifs_bin, "unmount", "--", task.mnt)
        assert r.returncode == 0 and not is_mounted(task.mnt), r.stderr
    r = run_roifs(roifs_bin, "mount", "-o", "ro,no_such_fuse_option", task.config, task.mnt)
    assert r.returncode != 0 and not is_mounted(task.mnt)


def test_helper_form_filters_mount_8_options(tmp_path, roifs_bin):
    """`roifs CONFIG MNT -o ...` as mount.fuse3 runs it: mount(8)'s options do not reach
    FUSE (which would refuse them), and it returns once the mount is ready."""
    task = counting_task(tmp_path, sleep=0)
    task.mnt.mkdir()
    with unmounting(roifs_bin, task.mnt):
        r = run_roifs(roifs_bin, task.config, task.mnt, "-o",
                      "rw,nosuid,nodev,noexec,defaults,auto,users,async,x-a=b,comment=c,"
                      "default_permissions")
        assert r.returncode == 0, r.stderr
        assert "ro" in check_mount(task.mnt, task.want)
    r = run_roifs(roifs_bin, task.config, task.mnt, "-o", "no_such_fuse_option")
    assert r.returncode != 0 and not is_mounted(task.mnt)
    r = run_roifs(roifs_bin, tmp_path / "missing.ini", task.mnt)
    assert r.returncode == 2 and "unknown command" in r.stderr, r.stderr


# ---------------------------------------------------------------- the man page


def test_man_page_renders():
    page = REPO / "docs" / "roifs.1"
    groff = shutil.which("groff")
    if not groff:
        pytest.skip("groff is not installed")
    r = subprocess.run([groff, "-man", "-Tutf8", "-ww", str(page)], capture_output=True,
                       text=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    text = re.sub(r".\x08", "", r.stdout)
    for word in ("roifs mount", "roifs warm", "roifs export", "roifs status", "roifs clean",
                 "roifs unmount", "roifs check", "EXIT STATUS", "FILES", "EXAMPLES",
                 "fuse.roifs", ".roifs/status", "[process]"):
        assert word in text, word
