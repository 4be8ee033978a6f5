"""The daemon's hot path (bench/notes/hotpath.md): chunks tiled by their ROIs are assembled
without the fill, a chunk that is exactly its only ROI is encoded straight from the result
(and written as it is when uncompressed), per-thread buffers are reused but a huge ROI does
not keep its memory. Each case against numpy, fresh and after a restart (results read back
from the store)."""
import numpy as np
import pytest
import zarr

from conftest import make_task


def read_all(m):
    return zarr.open(str(m.path), mode="r")[...]


def both_ways(mount, task, want, tmp_path):
    """The mounted array twice: computed, then after a remount with the chunk files gone (made
    again from the stored results)."""
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m), want)
    for f in (tmp_path / "cache").rglob("*"):
        if f.is_file() and "chunks" in f.relative_to(tmp_path / "cache").parts[:1]:
            f.unlink()
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m), want)


def test_tiled_chunks_show_no_fill(tmp_path, mount):
    """16x16 tiles of 8x8 in 32x32 chunks: every element is the ROI's; fill_value 9 nowhere."""
    data = np.arange(64 * 48, dtype="<u2").reshape(64, 48)
    rois = [((y, y + 8), (x, x + 8)) for y in range(0, 64, 8) for x in range(0, 48, 8)]
    task = make_task(tmp_path, data, (32, 32), rois=rois,
                     process={"builtin": "add", "param.value": 1},
                     output={"fill_value": 9, "compressor": "blosc"})
    both_ways(mount, task, data + 1, tmp_path)


def test_overlaps_hiding_a_gap_keep_the_fill(tmp_path, mount):
    """ROIs whose parts add up to the chunk's volume but overlap and leave a gap: the gap is
    the fill value (a volume check alone would leave it undefined)."""
    data = np.full((8, 8), 5, dtype="<u1")
    # 0:4 and 2:6 overlap by 2 rows, 32 + 32 = 64 elements, rows 6:8 uncovered
    rois = [((0, 4), (0, 8)), ((2, 6), (0, 8))]
    task = make_task(tmp_path, data, (8, 8), rois=rois,
                     process={"builtin": "add", "param.value": 1}, output={"fill_value": 3})
    want = np.full((8, 8), 3, dtype="<u1")
    want[0:6] = 6
    both_ways(mount, task, want, tmp_path)


def test_edge_chunk_margin_and_outside_input(tmp_path, mount):
    """Tiles covering the array but not the edge chunks' margins; and outside = input under
    tiles that cover only part of a chunk."""
    data = np.arange(40 * 40, dtype="<i4").reshape(40, 40)
    rois = [((y, min(y + 10, 40)), (x, min(x + 10, 40))) for y in range(0, 40, 10)
            for x in range(0, 40, 10)]
    task = make_task(tmp_path, data, (16, 16), rois=rois,
                     process={"builtin": "multiply", "param.value": -2},
                     output={"fill_value": 7})
    both_ways(mount, task, data * -2, tmp_path)
    task2 = make_task(tmp_path / "b", data, (16, 16), rois=rois[:3],
                      process={"builtin": "add", "param.value": 1},
                      output={"outside": "input"})
    want = data.copy()
    want[0:10, 0:30] += 1
    both_ways(mount, task2, want, tmp_path / "b")


@pytest.mark.parametrize("compressor", [None, "blosc", "zstd"])
@pytest.mark.parametrize("dtype", ["<u2", ">u2"])
def test_single_exact_roi_chunks(tmp_path, mount, compressor, dtype):
    """Each chunk exactly one ROI (a grid): encoded from the result, uncompressed and
    little-endian written as it is; big-endian and compressors through the encoder."""
    data = np.random.default_rng(1).integers(0, 60000, (3, 64, 96), dtype="<u2")
    rois = [((z, z + 1), (y, y + 32), (x, x + 32)) for z in range(3) for y in range(0, 64, 32)
            for x in range(0, 96, 32)]
    output = {"compressor": compressor or "none", "dtype": dtype}
    task = make_task(tmp_path, data, (1, 32, 32), rois=rois,
                     process={"builtin": "add", "param.value": 3}, output=output)
    want = np.minimum(data.astype(np.int64) + 3, 65535).astype(dtype)
    both_ways(mount, task, want, tmp_path)


def test_big_roi_and_halo_with_threads(tmp_path, mount, roifs_bin):
    """A 40 MiB ROI (beyond what a thread keeps) between small ones, a halo (the result cropped
    from a larger output), two threads: all correct, and the daemon's memory afterwards is not
    pinned by the big ROI's buffers."""
    data = np.random.default_rng(2).integers(0, 250, (2, 2048, 2560), dtype="<u4")
    rois = [((0, 1), (0, 2048), (0, 2560))] + \
        [((1, 2), (y, y + 256), (x, x + 256)) for y in range(0, 2048, 256)
         for x in range(0, 2560, 256)]
    task = make_task(tmp_path, data, (1, 512, 512), rois=rois,
                     process={"builtin": "copy", "threads": 2},
                     sections={"rois": {"halo": "0,8,8"}})
    with mount(task.config) as m:
        np.testing.assert_array_equal(read_all(m), data)
        rss = int([ln for ln in open(f"/proc/{m.proc.pid}/status")
                   if ln.startswith("VmRSS")][0].split()[1])
    print(f"VmRSS {rss} KiB")
    with open(roifs_bin, "rb") as f:
        if b"__asan_init" in f.read():
            return  # AddressSanitizer's allocator keeps freed memory in quarantine
    # The big ROI's 20 MiB input buffer is not kept by its thread: about 96 MiB here, 116 MiB
    # when every scratch buffer is kept whatever its size.
    assert rss < 108 * 1024, f"VmRSS {rss} KiB after the big ROI"
