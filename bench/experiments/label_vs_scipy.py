"""EXPERIMENT (not run by bench/run.sh): the `label` builtin's labeller (src/proc/label.c)
against scipy.ndimage.label(in > value), side by side on the same blocks, checked equal.

Blocks: a 2160x2560 uint16 field of view with about 1000 blobs (discs of radius 4-24 over
noise), and a 48x512x512 uint16 stack of balls. The C side is build/tests/test_label --bench
(label_run on the block in memory, one scratch reused, int32 output); the Python side times
ndimage.label(block > value) (the comparison included, as label_run does it). Both run REPS
calls per round, rounds alternate; the figures per side are the median of its rounds' medians and the fastest call (the
machine is shared: the fastest call is the least disturbed).
usage: label_vs_scipy.py [REPS]   (default 15; needs a built tree: scripts/build.sh)
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import ndimage

REPO = Path(__file__).resolve().parents[2]
EXE = REPO / os.environ.get("ROIFS_BUILD", "build") / "tests" / "test_label"
ROUNDS = 3


def blobs_2d(rng, shape=(2160, 2560), n=1300):
    img = rng.integers(100, 300, shape, dtype=np.uint16)
    yy, xx = np.ogrid[:shape[0], :shape[1]]
    for _ in range(n):
        cy, cx, r = rng.integers(0, shape[0]), rng.integers(0, shape[1]), rng.integers(4, 25)
        y0, y1, x0, x1 = max(cy - r, 0), min(cy + r + 1, shape[0]), max(cx - r, 0), min(cx + r + 1, shape[1])
        disc = (yy[y0:y1] - cy) ** 2 + (xx[:, x0:x1] - cx) ** 2 <= r * r
        img[y0:y1, x0:x1][disc] += np.uint16(1000)
    return img


def blobs_3d(rng, shape=(48, 512, 512), n=400):
    img = rng.integers(100, 300, shape, dtype=np.uint16)
    zz, yy, xx = np.ogrid[:shape[0], :shape[1], :shape[2]]
    for _ in range(n):
        c = [rng.integers(0, s) for s in shape]
        r = int(rng.integers(3, 12))
        sl = tuple(slice(max(ci - r, 0), min(ci + r + 1, s)) for ci, s in zip(c, shape))
        ball = ((zz[sl[0]] - c[0]) ** 2 + (yy[:, sl[1]] - c[1]) ** 2
                + (xx[:, :, sl[2]] - c[2]) ** 2) <= r * r
        img[sl][ball] += np.uint16(1000)
    return img


def time_scipy(img, value, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        lab, n = ndimage.label(img > value)
        out.append(time.perf_counter() - t0)
    return out, lab, n


def time_roifs(img, value, reps, tmp):
    src, dst = Path(tmp) / "in.raw", Path(tmp) / "out.raw"
    img.tofile(src)
    r = subprocess.run([str(EXE), "--bench", str(src), ",".join(map(str, img.shape)), "<u2",
                        str(value), str(dst), str(reps)], capture_output=True, text=True,
                       timeout=600, check=True)
    fields = r.stdout.split()
    med, fastest, n = float(fields[3]) / 1e3, float(fields[5]) / 1e3, int(fields[1])
    return med, fastest, np.fromfile(dst, np.int32).reshape(img.shape), n


def case(name, img, value, reps):
    sc, rf, sc_min, rf_min = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(ROUNDS):
            t, want, nwant = time_scipy(img, value, reps)
            sc.append(np.median(t))
            sc_min.append(min(t))
            med, fastest, got, ngot = time_roifs(img, value, reps, tmp)
            rf.append(med)
            rf_min.append(fastest)
            assert ngot == nwant and np.array_equal(got, want), f"{name}: labels differ from scipy"
    s, r = float(np.median(sc)), float(np.median(rf))
    s0, r0 = min(sc_min), min(rf_min)
    print(f"{name:24s} {nwant:5d} objects | median: scipy {s * 1e3:7.2f} ms, roifs "
          f"{r * 1e3:6.2f} ms, ratio {s / r:5.2f} | fastest: scipy {s0 * 1e3:7.2f} ms, roifs "
          f"{r0 * 1e3:6.2f} ms, ratio {s0 / r0:5.2f}")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    if not EXE.exists():
        sys.exit(f"{EXE} is not built: scripts/build.sh")
    rng = np.random.default_rng(16)
    print(f"median of {ROUNDS} rounds of {reps} calls each; labels checked equal to scipy's")
    case("2-D 2160x2560 uint16", blobs_2d(rng), 700, reps)
    case("3-D 48x512x512 uint16", blobs_3d(rng), 700, reps)


if __name__ == "__main__":
    main()
