"""Resuming an export (issue 13 item 4): a chunk file already in DEST is kept only when it was
made of exactly what the chunk is made of now (its record: chunk key, length, checksum) and
its bytes verify; after an input change, a damaged file or a copy without the records, the
chunk is written again, and DEST always equals a fresh reference."""
import re
import subprocess

import numpy as np
import pytest
import zarr

from conftest import make_task, run_roifs

SHAPE, CH = (32, 32), (16, 16)  # four chunks
# ROI 0 in chunk 0.0, ROI 1 in 0.1, ROI 2 across 1.0 and 1.1; each reads one input chunk
# (16x16 too), ROI 2 two
ROIS = [((0, 12), (0, 12)), ((4, 12), (18, 30)), ((20, 28), (4, 28))]


def task_and_ref(tmp_path):
    data = np.random.default_rng(4).integers(0, 1000, SHAPE, dtype="<i4")
    task = make_task(tmp_path, data, CH, rois=ROIS,
                     process={"builtin": "add", "param.value": 2},
                     output={"compressor": "blosc", "fill_value": -1})
    return task, data


def reference(data):
    ref = np.full(SHAPE, -1, "<i4")
    for (y0, y1), (x0, x1) in ROIS:
        ref[y0:y1, x0:x1] = data[y0:y1, x0:x1] + 2
    return ref


def export(roifs_bin, task, dest):
    r = run_roifs(roifs_bin, "export", task.config, dest)
    assert r.returncode == 0, r.stderr
    m = re.search(r"(\d+) chunk files written, (\d+) kept", r.stderr)
    assert m, r.stderr
    return int(m.group(1)), int(m.group(2))


def test_input_change_rewrites_the_chunks_it_reaches(tmp_path, roifs_bin):
    task, data = task_and_ref(tmp_path)
    dest = tmp_path / "out"
    assert export(roifs_bin, task, dest) == (4, 0)
    assert export(roifs_bin, task, dest) == (0, 4)
    z = zarr.open(str(task.input), mode="r+")
    data[0:16, 16:32] += 500  # input chunk 0.1: ROI 1 only, in output chunk 0.1
    z[0:16, 16:32] = data[0:16, 16:32]
    assert export(roifs_bin, task, dest) == (1, 3)
    np.testing.assert_array_equal(zarr.open(str(dest), mode="r")[:], reference(data))
    data[16:32, 0:16] -= 300  # input chunk 1.0: ROI 2, in output chunks 1.0 and 1.1
    z[16:32, 0:16] = data[16:32, 0:16]
    assert export(roifs_bin, task, dest) == (2, 2)
    np.testing.assert_array_equal(zarr.open(str(dest), mode="r")[:], reference(data))
    assert export(roifs_bin, task, dest) == (0, 4)


def test_damaged_destination_chunk_is_written_again(tmp_path, roifs_bin):
    task, data = task_and_ref(tmp_path)
    dest = tmp_path / "out"
    export(roifs_bin, task, dest)
    f = dest / "1.1"
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0xFF
    f.write_bytes(bytes(raw))  # same length, same file: its record still claims the old bytes
    assert export(roifs_bin, task, dest) == (1, 3)
    np.testing.assert_array_equal(zarr.open(str(dest), mode="r")[:], reference(data))


def test_copied_destination_is_not_trusted(tmp_path, roifs_bin):
    task, data = task_and_ref(tmp_path)
    dest = tmp_path / "out"
    export(roifs_bin, task, dest)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(dest), str(copy)], check=True)  # no xattrs: no records
    assert export(roifs_bin, task, copy) == (4, 0)
    np.testing.assert_array_equal(zarr.open(str(copy), mode="r")[:], reference(data))
