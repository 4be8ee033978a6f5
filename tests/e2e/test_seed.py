"""The seed scenario: a 4-element int64 array, a slow command processor (1 s per ROI),
read through zarr-python and dask. Each ROI runs once, in parallel, and never again."""
import time

import dask.array as da
import numpy as np
import pytest
import zarr

from conftest import PY, make_task

ADD2 = """\
import array, os, sys, time
time.sleep(1)
a = array.array("q")
a.frombytes(sys.stdin.buffer.read())
sys.stdout.buffer.write(array.array("q", (x + 2 for x in a)).tobytes())
sys.stdout.flush()
with open(sys.argv[1], "a") as f:
    f.write(os.environ.get("ROIFS_ROI", "?") + "\\n")
"""

ROI_SETS = {
    "singles": [((i, i + 1),) for i in range(4)],
    "pairs": [((i, i + 2),) for i in range(3)],
}


def read_zarr(mnt):
    return zarr.open(str(mnt), mode="r")[:]


def read_dask(mnt):
    return da.from_zarr(str(mnt)).compute()


READERS = {"zarr": read_zarr, "dask": read_dask}


def counter_lines(path):
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("rois", list(ROI_SETS))
@pytest.mark.parametrize("chunk", [1, 2, 4])
def test_seed(tmp_path, mount, chunk, rois, reader):
    script, counter = tmp_path / "add2.py", tmp_path / "counter"
    script.write_text(ADD2)
    roi_list = ROI_SETS[rois]
    task = make_task(tmp_path, np.zeros(4, "<i8"), (chunk,), rois=roi_list,
                     process={"command": f"{PY} {script} {counter}", "threads": 4})
    n = len(roi_list)
    expected = np.full(4, 2, "<i8")
    read = READERS[reader]

    with mount(task.config) as m:
        t0 = time.monotonic()
        got = read(m.path)
        elapsed = time.monotonic() - t0
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.dtype("<i8")
        assert sorted(counter_lines(counter)) == [str(i) for i in range(n)], \
            "each ROI must run exactly once"
        assert m.status()["calls"] == n
        assert elapsed < 1.6, f"read took {elapsed:.2f} s: ROIs did not run in parallel"

        np.testing.assert_array_equal(read(m.path), expected)
        assert len(counter_lines(counter)) == n, "a second read ran ROIs again"
        assert m.status()["calls"] == n

    with mount(task.config) as m:
        np.testing.assert_array_equal(read(m.path), expected)
        assert len(counter_lines(counter)) == n, "a remount with the same cache ran ROIs again"
        assert m.status()["calls"] == 0
