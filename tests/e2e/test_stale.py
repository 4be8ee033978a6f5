"""Nothing stale (issue 13 items 1 and 9): a ROI result carries the signature of exactly the
input it read and is checked against the input as it is when it is used, so an input rewritten
while its ROI computes, or fixed after a failed open, is never served old, during the mount or
after a remount; and after an input chunk is rewritten, each ROI whose read region touches it
runs exactly once, the others not at all."""
import threading
import time

import numpy as np
import pytest
import zarr

from conftest import PY, added_within, chunk_slices, make_task, read_bytes


def read_all(mnt):
    return zarr.open(str(mnt), mode="r")[:]


def counter_lines(path):
    return path.read_text().split() if path.exists() else []


# ---------------------------------------------------------------- 13.1: during a computation

# A command that adds 1 and, at its first call, rewrites input chunk 0.0 in place with other
# bytes of the same size and puts its mtime back: the file keeps the size, inode and mtime the
# ROI's read saw, as when a write that began before the read (the kernel sets mtime when a
# write begins) ends after it, leaving a result made of old or mixed bytes under the
# identity of the final file.
REWRITE_KEEPING_MTIME = """\
import os, sys, numpy as np
a = np.frombuffer(sys.stdin.buffer.read(), "<i4")
flag = {flag!r}
if not os.path.exists(flag):
    open(flag, "w").close()
    p = {chunk!r}
    st = os.stat(p)
    fd = os.open(p, os.O_WRONLY)
    half = st.st_size // 2
    os.pwrite(fd, (np.arange(half // 4, dtype="<i4") + 5000).tobytes(), 0)
    os.close(fd)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(p).st_mtime_ns == st.st_mtime_ns and os.stat(p).st_size == st.st_size
with open({counter!r}, "a") as f:
    f.write("x\\n")
sys.stdout.buffer.write((a + 1).astype("<i4").tobytes())
"""


def chunk_00(m):
    """Chunk 0.0 of the 8x8-chunked <i4 output."""
    return np.frombuffer(read_bytes(m / "0.0"), "<i4").reshape(8, 8)


def raced_then_new(m, got, data, new):
    """got, chunk 0.0 read by an open that raced with the input's write from data to new, is
    either's result (+ 1), never a mix; every later open reads new's."""
    assert (np.array_equal(got, data[0:8, 0:8] + 1) or
            np.array_equal(got, new[0:8, 0:8] + 1)), got
    np.testing.assert_array_equal(chunk_00(m), new[0:8, 0:8] + 1)


def remount_keeps(mount, task, new):
    """A remount reads chunk 0.0 made of new, from the cache (no processor call)."""
    with mount(task.config) as m:
        np.testing.assert_array_equal(chunk_00(m), new[0:8, 0:8] + 1)
        assert m.status()["calls"] == 0, "the current result was not kept"


def test_input_rewritten_keeping_its_identity_after_the_read(tmp_path, mount):
    """Issue 31 item 3: the input chunk is rewritten in place (same size, same inode, mtime put
    back) after the ROI's read and before its result is stored: the result made of the old
    bytes is never served once the open that made it has its answer: not to a later open,
    not after a remount; the ROI runs again once, on the new bytes."""
    data = np.arange(16 * 16, dtype="<i4").reshape(16, 16)
    flag, counter = tmp_path / "rewritten", tmp_path / "counter"
    (tmp_path / "p.py").write_text(REWRITE_KEEPING_MTIME.format(
        flag=str(flag), chunk=str(tmp_path / "in.zarr" / "0.0"), counter=str(counter)))
    task = make_task(tmp_path, data, (8, 8), rois=[((0, 8), (0, 8))],
                     process={"command": f"{PY} p.py", "threads": 1, "readahead": 0},
                     output={"chunks": "8,8"})
    new = data.copy()
    new[0:4, 0:8] = (np.arange(32) + 5000).reshape(4, 8)  # the first half of chunk 0.0
    with mount(task.config) as m:
        got = chunk_00(m)
        assert flag.exists()
        # the open that raced with the write may have the old version
        raced_then_new(m, got, data, new)
    remount_keeps(mount, task, new)
    assert counter_lines(counter) == ["x", "x"]




def test_input_rewritten_while_its_roi_computes(tmp_path, mount):
    """The ROI reads its input, then sleeps (param.delay) while the input chunk is rewritten:
    the result made from the old input must not be served for the new one."""
    data = np.arange(16 * 16, dtype="<i4").reshape(16, 16)
    task = make_task(tmp_path, data, (8, 8), rois=[((0, 8), (0, 8))],
                     process={"builtin": "add", "param.value": 1, "param.delay": 1.0,
                              "threads": 1, "readahead": 0},
                     output={"chunks": "8,8"})
    z = zarr.open(str(task.input), mode="r+")
    new = data.copy()
    new[0:8, 0:8] += 1000
    first = {}
    with mount(task.config) as m:
        def reader():
            first["bytes"] = read_bytes(m / "0.0")

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(0.4)  # the input is read, the processor sleeps
        z[0:8, 0:8] = new[0:8, 0:8]
        t.join(timeout=30)
        got = np.frombuffer(first["bytes"], "<i4").reshape(8, 8)
        # the open that raced with the write may have either version, never a mix; every
        # later open sees the input as it is now
        raced_then_new(m, got, data, new)
    remount_keeps(mount, task, new)


# A command that fails on any input value 999 and adds 1 otherwise; counts its runs.
FAIL_ON_999 = """\
import os, sys, numpy as np
with open(sys.argv[1], "a") as f:
    f.write(os.environ["ROIFS_ROI"] + "\\n")
a = np.frombuffer(sys.stdin.buffer.read(), "<i4")
if (a == 999).any():
    sys.exit("found 999")
sys.stdout.buffer.write((a + 1).astype("<i4").tobytes())
"""


def failing_task(tmp_path):
    data = np.arange(16 * 16, dtype="<i4").reshape(16, 16)
    data[12, 12] = 999  # in ROI 1 only
    script, counter = tmp_path / "f.py", tmp_path / "counter"
    script.write_text(FAIL_ON_999)
    # one output chunk (16x16) holding ROI 0 (fine) and ROI 1 (fails); input chunks of 8x16,
    # one per ROI
    task = make_task(tmp_path, data, (8, 16), rois=[((0, 8), (0, 16)), ((8, 16), (0, 16))],
                     process={"command": f"{PY} f.py {counter}", "threads": 1,
                              "readahead": 0},
                     output={"chunks": "16,16"})
    fixed = data + 10
    fixed[12, 12] = 5
    return task, counter, fixed


@pytest.mark.parametrize("reopen", ["same mount", "after a remount"])
def test_failed_open_then_fixed_input(tmp_path, mount, reopen):
    """ROI 0 succeeds and ROI 1 fails; the user fixes the input (every value changes); the next
    open must not assemble ROI 0's result made from the old input."""
    task, counter, fixed = failing_task(tmp_path)
    with mount(task.config) as m:
        with pytest.raises(OSError):
            read_bytes(m / "0.0")
        zarr.open(str(task.input), mode="r+")[:] = fixed
        if reopen == "same mount":
            got = np.frombuffer(read_bytes(m / "0.0"), "<i4").reshape(16, 16)
            np.testing.assert_array_equal(got, fixed + 1)
    with mount(task.config) as m:
        got = np.frombuffer(read_bytes(m / "0.0"), "<i4").reshape(16, 16)
        np.testing.assert_array_equal(got, fixed + 1)
    runs = counter_lines(counter)
    # each ROI at most once per version of its input: ROI 0 and 1 on the old input, both again
    assert sorted(runs) == ["0", "0", "1", "1"], runs


def test_failed_open_unchanged_input_reuses_the_good_result(tmp_path, mount):
    """The other side: when only the cause of the failure is fixed (the input chunk ROI 1
    reads), ROI 0's result, made from input that did not change, is reused after a remount
    (it was stored although its chunk failed)."""
    task, counter, _ = failing_task(tmp_path)
    data = zarr.open(str(task.input), mode="r")[:]
    with mount(task.config) as m:
        with pytest.raises(OSError):
            read_bytes(m / "0.0")
    assert counter_lines(counter) == ["0", "1"]
    data[12, 12] = 5
    zarr.open(str(task.input), mode="r+")[8:16, :] = data[8:16, :]
    with mount(task.config) as m:
        got = np.frombuffer(read_bytes(m / "0.0"), "<i4").reshape(16, 16)
        np.testing.assert_array_equal(got, data + 1)
        assert m.status()["calls"] == 1
    assert counter_lines(counter) == ["0", "1", "1"]


# ---------------------------------------------------------------- 13.9: exactly once

ADD7 = ("echo $ROIFS_ROI >> {counter}; "
        "{py} -c 'import sys,numpy as n;a=n.frombuffer(sys.stdin.buffer.read(),\"<i4\");"
        "sys.stdout.buffer.write((a+7).astype(\"<i4\").tobytes())'")
SHAPE, CH, HALO = (64, 64), (16, 16), 2


def spanning_rois(seed, n=41):
    rng = np.random.default_rng(seed)
    rois = []
    for _ in range(n):
        y, x = rng.integers(0, 58, 2)
        h, w = rng.integers(3, 30, 2)
        rois.append(((int(y), int(min(y + h, 64))), (int(x), int(min(x + w, 64)))))
    return rois


def touching(rois, block):
    """ROIs whose read region (box grown by the halo, clipped) meets the input block."""
    (b0, b1), (c0, c1) = block
    out = []
    for i, ((y0, y1), (x0, x1)) in enumerate(rois):
        ry0, ry1 = max(0, y0 - HALO), min(64, y1 + HALO)
        rx0, rx1 = max(0, x0 - HALO), min(64, x1 + HALO)
        if ry0 < b1 and b0 < ry1 and rx0 < c1 and c0 < rx1:
            out.append(i)
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_remount_after_one_input_chunk_rewritten(tmp_path, mount, seed):
    rng = np.random.default_rng(seed + 100)
    data = rng.integers(0, 1000, SHAPE, dtype="<i4")
    rois = spanning_rois(seed)
    counter = tmp_path / "counter"
    task = make_task(tmp_path, data, CH, rois=rois,
                     process={"command": ADD7.format(counter=counter, py=PY), "threads": 2},
                     output={"compressor": "blosc", "fill_value": -1},
                     sections={"rois": {"halo": f"{HALO},{HALO}"}})
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m.path), added_within(data, rois, 7))
    assert sorted(map(int, counter_lines(counter))) == list(range(len(rois)))
    counter.unlink()
    block = ((16, 32), (16, 32))  # input chunk 1.1, rewritten while unmounted
    data[16:32, 16:32] += 5000
    zarr.open(str(task.input), mode="r+")[16:32, 16:32] = data[16:32, 16:32]
    want = touching(rois, block)
    assert 0 < len(want) < len(rois)
    with mount(task.config) as m:
        z = zarr.open(str(m.path), mode="r")
        # chunk by chunk, in an order that reads the ROIs spanning chunks several times
        out = np.empty(SHAPE, "<i4")
        for idx in [(i, j) for i in range(4) for j in range(4)][::-1]:
            sl = chunk_slices(idx, SHAPE, CH)
            out[sl] = z[sl]
        np.testing.assert_array_equal(out, added_within(data, rois, 7))
        np.testing.assert_array_equal(read_all(m.path), added_within(data, rois, 7))
        calls = m.status()["calls"]
    runs = sorted(map(int, counter_lines(counter)))
    assert runs == want, f"ran {runs}, expected each of {want} exactly once"
    assert calls == len(want)
