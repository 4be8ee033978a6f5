"""Failures (docs/mounted-tree.md, docs/mounted-tree.md#status-file, docs/processors.md#a-command):
a failing ROI gives EIO for the chunks that need it, shows up in the status file, leaves the mount
serving, and is retried by a later open."""
import errno
import random

import numpy as np
import pytest
import zarr
from numcodecs.blosc import SHUFFLE, Blosc

from conftest import PY, make_task, read_bytes

# Multiplies <i4 input by 10. For ROI 1, while the flag file exists, misbehaves as argv[1]
# says: "fail" (exit 3 with a message), "short" or "long" (wrong number of bytes).
TIMES10 = """\
import array, os, sys
mode, flag, counter = sys.argv[1:4]
data = sys.stdin.buffer.read()
roi = os.environ["ROIFS_ROI"]
with open(counter, "a") as f:
    f.write(roi + "\\n")
a = array.array("i")
a.frombytes(data)
out = array.array("i", (10 * x for x in a)).tobytes()
if roi == "1" and os.path.exists(flag):
    if mode == "fail":
        sys.stderr.write("boom: roi 1 failed on purpose\\n")
        sys.exit(3)
    out = out[:-1] if mode == "short" else out + b"\\0\\0\\0\\0"
sys.stdout.buffer.write(out)
"""

ROIS = [((0, 2),), ((2, 4),), ((4, 6),), ((6, 8),)]  # ROI i lies in chunk i


def expect_eio(path):
    with pytest.raises(OSError) as e:
        read_bytes(path)
    assert e.value.errno == errno.EIO, f"expected EIO, got {e.value!r}"


def attempts(counter):
    lines = counter.read_text().split() if counter.exists() else []
    return {r: lines.count(r) for r in set(lines)}


@pytest.mark.parametrize("mode", ["fail", "short", "long"])
def test_failing_command(tmp_path, mount, mode):
    script, flag, counter = tmp_path / "times10.py", tmp_path / "flag", tmp_path / "counter"
    script.write_text(TIMES10)
    flag.touch()
    inp = np.arange(1, 9, dtype="<i4")
    task = make_task(tmp_path, inp, (2,), rois=ROIS,
                     process={"command": f"{PY} {script} {mode} {flag} {counter}",
                              "threads": 2},
                     output={"compressor": "none"})
    want = inp * 10

    with mount(task.config) as m:
        expect_eio(m / "1")
        for i in (0, 2, 3):
            assert read_bytes(m / str(i)) == want[2 * i:2 * i + 2].tobytes()

        st = m.status()
        assert st["rois"]["failed"] >= 1, st
        errs = [e for e in st["errors"] if e.get("roi") == 1]
        assert errs, f"no errors entry for ROI 1: {st['errors']}"
        if mode == "fail":
            assert any("boom: roi 1 failed on purpose" in e["message"] for e in errs), errs
        assert m.alive()
        assert (m / ".zarray").read_bytes()

        expect_eio(m / "1")  # still failing: tried again, failed again
        assert attempts(counter)["1"] >= 2, "a later open did not retry the failed ROI"

        flag.unlink()
        assert read_bytes(m / "1") == want[2:4].tobytes()
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], want)
        a = attempts(counter)
        assert all(a[r] == 1 for r in "023"), f"ROIs that worked ran again: {a}"
        assert m.status()["calls"] == sum(a.values())


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_input_chunk(tmp_path, mount, damage):
    inp = np.arange(1, 9, dtype="<i2")
    task = make_task(tmp_path, inp, (2,), rois=ROIS, compressor=Blosc("lz4", 5, SHUFFLE),
                     process={"builtin": "copy", "threads": 2},
                     output={"compressor": "none"})
    chunk = task.input / "1"
    if damage == "garbage":
        chunk.write_bytes(random.Random(1).randbytes(40))
    else:
        chunk.write_bytes(chunk.read_bytes()[:-2])

    with mount(task.config) as m:
        expect_eio(m / "1")
        for i in (0, 2, 3):
            assert read_bytes(m / str(i)) == inp[2 * i:2 * i + 2].tobytes()
        expect_eio(m / "1")
        assert m.alive(), f"daemon died:\n{m.log_text()}"
        assert m.status()["rois"]["failed"] >= 1
