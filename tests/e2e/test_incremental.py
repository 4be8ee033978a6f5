"""Recompute only what changed (issue 19 items 1, 4 and 5; SPEC §12): ROI results are kept
under keys made of what they depend on, so after an edit of the ROI list (ROIs appended,
removed, moved, swapped), of a param or of one input chunk, a remount or `warm` runs the
processor exactly for the ROIs whose key is new, and the output, against a numpy reference
every time, follows the new list; the default cache directory is named by the job (the
configuration file and the input), not by its ROI list, so an edit keeps the cache."""
import json
import os
import re
import subprocess
import threading
import time

import numpy as np
import pytest
import zarr

from conftest import PY, added_within, make_task, run_roifs, set_option, write_rois

SHAPE, CH = (64, 64), (16, 16)
HALO = 2


def base_rois():
    """Twelve ROIs: some inside one chunk, some spanning chunks, some overlapping."""
    return [((0, 10), (0, 10)), ((4, 20), (4, 20)), ((20, 30), (0, 40)),
            ((30, 50), (30, 50)), ((40, 64), (0, 12)), ((0, 16), (48, 64)),
            ((10, 14), (30, 60)), ((50, 60), (50, 60)), ((33, 47), (2, 9)),
            ((18, 26), (18, 26)), ((56, 64), (20, 40)), ((2, 6), (40, 44))]


def counter_lines(path):
    return sorted(path.read_text().split()) if path.exists() else []


# A command that adds param value to its block and notes the ROI box it ran for.
ADD = """\
import os, sys, numpy as np
with open({counter!r}, "a") as f:
    f.write(os.environ["ROIFS_START"].replace(",", ".") + "-" +
            os.environ["ROIFS_STOP"].replace(",", ".") + "\\n")
a = np.frombuffer(sys.stdin.buffer.read(), "<i4")
sys.stdout.buffer.write((a + int(os.environ["ROIFS_PARAM_VALUE"])).astype("<i4").tobytes())
"""


def box_name(roi):
    return f"{roi[0][0]}.{roi[1][0]}-{roi[0][1]}.{roi[1][1]}"


def job(tmp_path, cache=True, threads=2):
    rng = np.random.default_rng(19)
    data = rng.integers(0, 1000, SHAPE, dtype="<i4")
    counter = tmp_path / "counter"
    (tmp_path / "f.py").write_text(ADD.format(counter=str(counter)))
    task = make_task(tmp_path, data, CH, rois=base_rois(),
                     process={"command": f"{PY} f.py", "param.value": 1, "threads": threads},
                     output={"compressor": "blosc", "fill_value": -1},
                     sections={"rois": {"halo": f"{HALO},{HALO}"},
                               **({} if cache else {"cache": None})})
    return task, data, counter


def read_all(mnt):
    return zarr.open(str(mnt), mode="r")[:]


def mount_and_read(mount, task, data, rois, value=1):
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m.path), added_within(data, rois, value))
        return m.status()


def test_edits_compute_only_new_keys(tmp_path, mount):
    task, data, counter = job(tmp_path)
    rois = base_rois()
    st = mount_and_read(mount, task, data, rois)
    assert st["calls"] == len(rois)
    counter.unlink()

    def edit(new_rois, expect_runs, value=1):
        write_rois(task, new_rois)
        st = mount_and_read(mount, task, data, new_rois, value)
        runs = counter_lines(counter)
        if counter.exists():
            counter.unlink()
        assert st["calls"] == len(expect_runs), (st["calls"], runs)
        assert runs == sorted(map(box_name, expect_runs))
        return st

    # appending 3 ROIs: 3 calls
    added = [((8, 40), (8, 40)), ((60, 64), (60, 64)), ((1, 3), (1, 63))]
    rois = rois + added
    st = edit(rois, added)
    assert st["results"]["reused"] == len(rois) - 3
    # removing 2: 0 calls (chunks they touched are assembled again from the other results)
    rois = [r for i, r in enumerate(rois) if i not in (1, 6)]
    edit(rois, [])
    # moving 1: 1 call
    moved = ((41, 52), (13, 29))
    rois[3] = moved
    edit(rois, [moved])
    # swapping two overlapping ROIs: 0 calls, and the later one wins where they overlap
    i, j = rois.index(((8, 40), (8, 40))), rois.index(((20, 30), (0, 40)))
    rois[i], rois[j] = rois[j], rois[i]
    edit(rois, [])
    # a param: every ROI
    set_option(task, "param.value", 5)
    edit(rois, rois, value=5)
    # back to the first param value: its results were kept
    set_option(task, "param.value", 1)
    edit(rois, [], value=1)


def touching(rois, block):
    """The ROIs whose read region (box grown by the halo) touches block."""
    (b0, b1), (c0, c1) = block
    out = []
    for (y0, y1), (x0, x1) in rois:
        ry0, ry1 = max(0, y0 - HALO), min(SHAPE[0], y1 + HALO)
        rx0, rx1 = max(0, x0 - HALO), min(SHAPE[1], x1 + HALO)
        if ry0 < b1 and b0 < ry1 and rx0 < c1 and c0 < rx1:
            out.append(((y0, y1), (x0, x1)))
    return out


def test_one_input_chunk_rewritten_then_warm(tmp_path, mount, roifs_bin):
    task, data, counter = job(tmp_path)
    rois = base_rois()
    r = run_roifs(roifs_bin, "warm", task.config, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"{len(rois)} ROIs computed" in r.stderr, r.stderr
    counter.unlink()
    block = ((16, 32), (32, 48))  # input chunk 1.2
    data[16:32, 32:48] += 3000
    zarr.open(str(task.input), mode="r+")[16:32, 32:48] = data[16:32, 32:48]
    want = touching(rois, block)
    assert 0 < len(want) < len(rois)
    r = run_roifs(roifs_bin, "warm", task.config, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"{len(want)} ROI{'s' if len(want) > 1 else ''} computed" in r.stderr, r.stderr
    assert counter_lines(counter) == sorted(map(box_name, want))
    # an edit of the list, then warm: only the new ROI; the mount afterwards: nothing
    counter.unlink()
    rois = rois[:5] + [((3, 9), (50, 61))] + rois[5:]
    write_rois(task, rois)
    r = run_roifs(roifs_bin, "warm", task.config, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "1 ROI computed" in r.stderr, r.stderr
    st = mount_and_read(mount, task, data, rois)
    assert st["calls"] == 0
    assert counter_lines(counter) == [box_name(((3, 9), (50, 61)))]


def test_default_cache_directory_survives_an_edit(tmp_path, mount, monkeypatch):
    """Without [cache] dir, the cache is $XDG_CACHE_HOME/roifs/<id of the job>: the same
    directory after the ROI list and a param changed, so the results are found."""
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    task, data, counter = job(tmp_path, cache=False)
    rois = base_rois()
    assert mount_and_read(mount, task, data, rois)["calls"] == len(rois)
    dirs = os.listdir(xdg / "roifs")
    assert len(dirs) == 1
    rois = rois + [((8, 40), (8, 40))]
    write_rois(task, rois)
    assert mount_and_read(mount, task, data, rois)["calls"] == 1
    set_option(task, "param.value", 2)
    assert mount_and_read(mount, task, data, rois, 2)["calls"] == len(rois)
    assert os.listdir(xdg / "roifs") == dirs


def test_two_processes_on_one_cache_during_an_edit(tmp_path, mount, roifs_bin):
    """A mount of the list as it was keeps serving it while the file is edited and the new
    list is warmed and mounted next to it on the same cache: each serves its own version,
    never the other's (the chunk files, named by chunk, go back and forth between them), and
    the ROIs of the new list that are new run once in all."""
    task, data, counter = job(tmp_path)
    old = base_rois()
    ref_old = added_within(data, old)
    with mount(task.config) as a:
        np.testing.assert_array_equal(read_all(a.path), ref_old)
        counter.unlink()
        added = [((8, 40), (8, 40)), ((60, 64), (60, 64))]
        moved = ((41, 52), (13, 29))
        new = old + added
        new[3] = moved
        del new[6]
        ref_new = added_within(data, new)
        write_rois(task, new)
        stop, seen, errors = threading.Event(), [0], []

        def reader(path, ref):
            while not stop.is_set():
                try:
                    np.testing.assert_array_equal(read_all(path), ref)
                    seen[0] += 1
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(e)
                    return

        th = threading.Thread(target=reader, args=(a.path, ref_old))
        th.start()
        try:
            r = run_roifs(roifs_bin, "warm", task.config, timeout=60)
            assert r.returncode == 0, r.stderr
            assert "3 ROIs computed" in r.stderr, r.stderr
            with mount(task.config, mnt=tmp_path / "mnt2") as b:
                tb = threading.Thread(target=reader, args=(b.path, ref_new))
                tb.start()
                time.sleep(2)
                stop.set()
                tb.join(timeout=60)
                assert b.status()["calls"] == 0
        finally:
            stop.set()
            th.join(timeout=60)
        assert not errors, errors[0]
        assert seen[0] > 4
        assert a.status()["calls"] == len(old)
    assert counter_lines(counter) == sorted(map(box_name, added + [moved]))
    st = mount_and_read(mount, task, data, new)
    assert st["calls"] == 0


def test_provenance_attributes(tmp_path, mount, roifs_bin):
    """The output's attributes name the configuration's fingerprint, the processor's identity
    and the hashes of the files it runs, and nothing of the mount's history; the status file
    says how many results were cached when the mount started and when they were made."""
    task, data, counter = job(tmp_path)
    t0 = int(time.time())
    r = run_roifs(roifs_bin, "warm", task.config, timeout=60)
    assert r.returncode == 0
    t1 = int(time.time())
    rois = base_rois() + [((8, 40), (8, 40))]
    write_rois(task, rois)
    with mount(task.config) as m:
        attrs = json.loads((m.path / ".zattrs").read_text())["roifs"]
        assert attrs["rois"] == len(rois)
        assert re.fullmatch(r"[0-9a-f]{16}", attrs["fingerprint"])
        assert re.fullmatch(r"[0-9a-f]{32}", attrs["processor"]["identity"])
        files = attrs["processor"]["files"]
        assert sorted(files) == sorted([PY, str(tmp_path / "f.py")]), files
        assert files[str(tmp_path / "f.py")]["size"] == (tmp_path / "f.py").stat().st_size
        # the hash of a file is XXH3-128 of its bytes: what xxh128sum prints
        for path, f in files.items():
            xxh = subprocess.run(["xxh128sum", path], capture_output=True, text=True, check=True)
            assert f["hash"] == xxh.stdout.split()[0], (path, f, xxh.stdout)
        assert "results" not in attrs, attrs
        st = m.status()
        res = st["results"]
        assert res["cached_at_start"] == len(rois) - 1 and st["rois"]["total"] == len(rois), st
        made = [time.mktime(time.strptime(res[k], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
                for k in ("made_from", "made_until")]
        assert t0 - 1 <= made[0] <= made[1] <= t1 + 1, (res, t0, t1)
        np.testing.assert_array_equal(read_all(m.path), added_within(data, rois))
        # computing the new ROI changes nothing the mount already said
        assert json.loads((m.path / ".zattrs").read_text())["roifs"] == attrs
        st = m.status()
        assert st["results"]["reused"] == len(rois) - 1 and st["results"]["computed"] == 1
        out = run_roifs(roifs_bin, "status", m.path).stdout
        assert f"results: {len(rois) - 1} reused from the cache" in out, out
    # the processor's code edited: another identity, another hash
    (tmp_path / "f.py").write_text((tmp_path / "f.py").read_text() + "\n# edited\n")
    with mount(task.config) as m:
        again = json.loads((m.path / ".zattrs").read_text())["roifs"]
        assert again["processor"]["identity"] != attrs["processor"]["identity"]
        assert again["processor"]["files"][str(tmp_path / "f.py")]["hash"] != \
            files[str(tmp_path / "f.py")]["hash"]
        assert m.status()["results"]["cached_at_start"] == 0
        assert m.status()["results"]["made_from"] is None
    r = run_roifs(roifs_bin, "check", task.config)
    assert "ROIs:      0 cached" in r.stdout and f"{len(rois)} to compute" in r.stdout, r.stdout


def test_many_rois_are_a_few_files(tmp_path, roifs_bin):
    """Every ROI result is kept, packed: 10,000 ROIs are one pack file, not 10,000 files."""
    data = np.arange(400 * 400, dtype="<u2").reshape(400, 400)
    task = make_task(tmp_path, data, (100, 100), rois=[],
                     process={"builtin": "add", "param.value": 1},
                     sections={"rois": {"file": None, "grid": "4,4"}})
    r = run_roifs(roifs_bin, "warm", task.config, timeout=120)
    assert r.returncode == 0 and "10000 ROIs computed" in r.stderr, r.stderr
    packs = os.listdir(task.cache / "results")
    assert packs == ["pack-000001"], packs
    data_ = (task.cache / "results" / "pack-000001").read_bytes()
    assert data_.count(b"roifsP1\0") == 10000
    assert len(os.listdir(task.cache / "chunks")) == 16


def test_results_are_named_by_content_not_by_file_identity(tmp_path, mount, roifs_bin):
    """Issue 31 item 11 (SPEC §12: the input chunks a ROI reads, by content signature): a
    `touch` of an input chunk, or chunks rewritten with the same bytes (in place, or a new
    file renamed over the old one as a converter run again does), compute nothing, at `warm`
    or at a remount; other bytes in one chunk compute exactly the ROIs that read it."""
    task, data, counter = job(tmp_path)
    rois = base_rois()
    r = run_roifs(roifs_bin, "warm", task.config, timeout=60)
    assert r.returncode == 0 and f"{len(rois)} ROIs computed" in r.stderr, r.stderr
    counter.unlink()

    def warm_computes(n):
        r = run_roifs(roifs_bin, "warm", task.config, timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"; {n} ROI{'' if n == 1 else 's'} computed" in r.stderr, r.stderr

    os.utime(task.input / "1.2")  # touch: a new mtime, the same bytes
    warm_computes(0)
    for key in ("0.0", "1.1", "2.3", "3.0"):  # the same bytes again: 2 in place, 2 renamed
        p = task.input / key
        raw = p.read_bytes()
        if key in ("0.0", "1.1"):
            with open(p, "r+b") as f:
                f.write(raw)
        else:
            (task.input / (key + ".new")).write_bytes(raw)
            os.rename(task.input / (key + ".new"), p)
    warm_computes(0)
    assert mount_and_read(mount, task, data, rois)["calls"] == 0
    assert not counter.exists()
    # other bytes in one chunk: exactly the ROIs that read it
    block = ((32, 48), (0, 16))  # input chunk 2.0
    data[32:48, 0:16] += 7000
    zarr.open(str(task.input), mode="r+")[32:48, 0:16] = data[32:48, 0:16]
    want = touching(rois, block)
    assert 0 < len(want) < len(rois)
    warm_computes(len(want))
    assert counter_lines(counter) == sorted(map(box_name, want))
    assert mount_and_read(mount, task, data, rois)["calls"] == 0
