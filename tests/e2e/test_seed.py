"""The seed scenario: a 4-element int64 array, a slow command processor (1 s per ROI),
read through zarr-python and dask. Each ROI runs once, in parallel, and never again."""
import dask.array as da
import numpy as np
import pytest
import zarr

from conftest import PY, make_task

ADD2 = """\
import array, os, sys, time
start = time.time()
time.sleep(1)
a = array.array("q")
a.frombytes(sys.stdin.buffer.read())
sys.stdout.buffer.write(array.array("q", (x + 2 for x in a)).tobytes())
sys.stdout.flush()
with open(sys.argv[1], "a") as f:
    f.write(f"{os.environ.get('ROIFS_ROI', '?')} {start} {time.time()}\\n")
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
    """The ROI of each processor call."""
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def ran_together(path):
    """True when every call was running at one moment (the latest start before the earliest
    end): the ROIs ran in parallel, whatever the machine's load made each take."""
    spans = [tuple(map(float, line.split()[1:])) for line in path.read_text().splitlines()]
    return max(a for a, _ in spans) < min(b for _, b in spans)


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
        got = read(m.path)
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.dtype("<i8")
        assert sorted(counter_lines(counter)) == [str(i) for i in range(n)], \
            "each ROI must run exactly once"
        assert m.status()["calls"] == n
        assert ran_together(counter), "the ROIs did not run in parallel:\n" + counter.read_text()

        np.testing.assert_array_equal(read(m.path), expected)
        assert len(counter_lines(counter)) == n, "a second read ran ROIs again"
        assert m.status()["calls"] == n

    with mount(task.config) as m:
        np.testing.assert_array_equal(read(m.path), expected)
        assert len(counter_lines(counter)) == n, "a remount with the same cache ran ROIs again"
        assert m.status()["calls"] == 0
