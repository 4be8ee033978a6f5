"""Masked ROIs (docs/masks.md): nuclei segmented within each organoid, as Fractal's
masked tasks do, against Fractal's own pattern, a serial Python loop over the organoids.

Input: a 4096x4096 uint16 image (chunks 1024x1024, blosc lz4) of ORGANOIDS organoids, discs of
radius 120-260 holding bright nuclei on a noisy background, and their label image (uint32, the
same chunks). ROIs: one per organoid, its bounding box with `@ label` (from
scipy.ndimage.find_objects), mask = the label image, mask_input = zero; f = builtin label
(connected components of in > VALUE); output uint32, blosc lz4.

roifs: a cold full read of the mount with zarr-python (fresh cache each time). Alternative:
the loop of fractal-tasks-core's masked segmentation: for each organoid read its box of the
image and of the label image, zero the image outside the object, label, read the box of the
output, paste the labels where the object is, write the box back (zarr-python, same
compressor). Both outputs are compared with each other and with a numpy reference. Target:
roifs faster than the loop (ratio < 1), which a lab would expect of a parallel mount."""
import os
import time

import numpy as np
import zarr
from numcodecs import Blosc
from scipy import ndimage

import common as C

REPS = int(os.environ.get("REPS", 5))
N, CH = 4096, 1024
ORGANOIDS = 60
VALUE = 600
COMP = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)


def make_data(d):
    """The image, the organoid label image, and the masked ROIs [(box, label)]."""
    rng = np.random.default_rng(11)
    img = rng.normal(300, 40, (N, N)).clip(0, 65535).astype("<u2")
    lab = np.zeros((N, N), "<u4")
    yy, xx = np.ogrid[:N, :N]
    for k in range(1, ORGANOIDS + 1):
        r = int(rng.integers(120, 260))
        cy, cx = (int(v) for v in rng.integers(r, N - r, 2))
        sl = (slice(cy - r, cy + r), slice(cx - r, cx + r))
        disc = (yy[sl[0]] - cy) ** 2 + (xx[:, sl[1]] - cx) ** 2 < r * r
        lab[sl][disc] = k  # later organoids cover earlier ones, as overlapping objects do
    for _ in range(6000):  # nuclei: bright spots, inside organoids or not
        y, x = (int(v) for v in rng.integers(6, N - 6, 2))
        img[y - 4:y + 5, x - 4:x + 5] = 1500
    zarr.open(str(d / "img.zarr"), mode="w", shape=img.shape, chunks=(CH, CH), dtype="<u2",
              compressor=COMP)[:] = img
    zarr.open(str(d / "org.zarr"), mode="w", shape=lab.shape, chunks=(CH, CH), dtype="<u4",
              compressor=COMP)[:] = lab
    rois = []
    for k, sl in enumerate(ndimage.find_objects(lab), start=1):
        if sl is not None:
            rois.append((((sl[0].start, sl[0].stop), (sl[1].start, sl[1].stop)), k))
    return img, lab, rois


def reference(img, lab, rois):
    """docs/masks.md in numpy: outside every object the fill (0); later ROIs win."""
    out = np.zeros(img.shape, "<u4")
    for ((y0, y1), (x0, x1)), k in rois:
        m = lab[y0:y1, x0:x1] == k
        got = ndimage.label(np.where(m, img[y0:y1, x0:x1], 0) > VALUE)[0]
        out[y0:y1, x0:x1][m] = got[m]
    return out


def fractal_loop(d, rois):
    """fractal-tasks-core's masked loop, serial: read, mask, label, read-modify-write."""
    img = zarr.open(str(d / "img.zarr"), mode="r")
    lab = zarr.open(str(d / "org.zarr"), mode="r")
    out = zarr.open(str(d / "loop.zarr"), mode="w", shape=img.shape, chunks=(CH, CH),
                    dtype="<u4", compressor=COMP)
    for ((y0, y1), (x0, x1)), k in rois:
        m = lab[y0:y1, x0:x1] == k
        got = ndimage.label(np.where(m, img[y0:y1, x0:x1], 0) > VALUE)[0].astype("<u4")
        box = out[y0:y1, x0:x1]
        box[m] = got[m]
        out[y0:y1, x0:x1] = box


def main():
    info = C.machine()
    with C.scratch("masks") as d:
        img, lab, rois = make_data(d)
        expected = reference(img, lab, rois)
        with open(d / "rois.txt", "w") as f:
            for ((y0, y1), (x0, x1)), k in rois:
                f.write(f"{y0}:{y1},{x0}:{x1} @ {k}\n")
        cfg = C.write_config(d / "task.ini", {
            "input": {"path": d / "img.zarr"},
            "rois": {"file": d / "rois.txt", "mask": d / "org.zarr", "mask_input": "zero"},
            "process": {"builtin": "label", "param.value": VALUE},
            "output": {"dtype": "<u4", "compressor": "blosc", "cname": "lz4", "clevel": 5,
                       "shuffle": "shuffle"},
            "cache": {"dir": d / "cache"}})

        def run_roifs():
            return C.cold_read(cfg, d, len(rois), expected)

        def run_loop():
            C.rmtree(d / "loop.zarr")
            t = C.timed(lambda: fractal_loop(d, rois))
            assert np.array_equal(zarr.open(str(d / "loop.zarr"), mode="r")[:], expected)
            return t

        res = C.interleaved(REPS, {"roifs": run_roifs, "loop": run_loop})

    read = [x["read_s"] for x in res["roifs"]]
    cpu = [x["cpu_s"] for x in res["roifs"]]
    loop = res["loop"]
    mr, ml = C.median(read), C.median(loop)
    covered = float((lab > 0).mean())
    rows = [C.time_row("roifs: cold read of the mount (`zarr.open(MNT)[:]`)", read,
                       f"{mr / ml:.2f}×"),
            C.time_row("Fractal's masked loop (serial, zarr-python)", loop, "1×")]
    md = (f"{REPS} repeats, interleaved; medians. {len(rois)} masked ROIs (organoids of radius "
          f"120–260 covering {covered * 100:.0f}% of a {N}×{N} uint16 image, chunks {CH}×{CH}, "
          f"blosc lz4), builtin label (in > {VALUE}) within each organoid, mask_input = zero, "
          f"uint32 output. Both outputs equal the numpy reference of docs/masks.md. roifs daemon "
          f"CPU during the read: median {C.median(cpu):.2f} s.\n\n" +
          C.md_table(["what", "median (s)", "range (s)", "/ loop"], rows))
    summary = [{"scenario": f"masked ROIs: {len(rois)} organoids, nuclei labelled within each",
                "roifs": f"{mr:.3f} s", "alternative": f"Fractal's masked loop {ml:.3f} s",
                "ratio": f"{mr / ml:.2f}×", "target": "< 1× (faster than the loop)",
                "met": mr < ml}]
    C.save("masks", "Masked ROIs: nuclei within organoids", summary, md,
           {"roifs_read_s": read, "roifs_cpu_s": cpu, "loop_s": loop}, info)


if __name__ == "__main__":
    main()
