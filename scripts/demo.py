"""The demo: writes the input of config/demo.ini, mounts it, reads the result with zarr-python,
checks it against numpy/scipy computed here, prints a summary, and unmounts."""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from scipy import ndimage

REPO = Path(__file__).resolve().parent.parent
ROIFS = os.environ.get("ROIFS_BIN", str(REPO / "build" / "roifs"))
CONFIG = REPO / "config" / "demo.ini"
DATA = REPO / "config" / "demo"


def make_input():
    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[0:2048, 0:2048]
    img = (2000 + 1000 * np.sin(yy / 97.0) * np.cos(xx / 61.0) + rng.normal(0, 200, yy.shape))
    z = zarr.open(str(DATA / "in.zarr"), mode="w", shape=img.shape, chunks=(512, 512),
                  dtype="<u2")
    z[:] = np.clip(img, 0, 65535).astype("<u2")
    z.attrs["description"] = "roifs demo input"
    return z[:]


def reference(img, rois):
    out = np.zeros_like(img)
    for (y0, y1), (x0, x1) in rois:
        ry0, ry1, rx0, rx1 = max(y0 - 8, 0), min(y1 + 8, 2048), max(x0 - 8, 0), min(x1 + 8, 2048)
        blur = ndimage.gaussian_filter(img[ry0:ry1, rx0:rx1].astype(np.float64), 2.0,
                                       mode="reflect", truncate=4.0)
        out[y0:y1, x0:x1] = np.clip(np.rint(blur[y0 - ry0:y1 - ry0, x0 - rx0:x1 - rx0]),
                                    0, 65535)
    return out


def read_rois():
    rois = []
    for line in (REPO / "config" / "demo-rois.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            rois.append([tuple(int(v) for v in r.split(":")) for r in line.split(",")])
    return rois


def main():
    DATA.mkdir(exist_ok=True)
    subprocess.run(["rm", "-rf", str(DATA / "cache")], check=True)
    img = make_input()
    rois = read_rois()
    subprocess.run([ROIFS, "check", str(CONFIG)], check=True)
    mnt = tempfile.mkdtemp(prefix="roifs-demo-")
    subprocess.run([ROIFS, "mount", str(CONFIG), mnt], check=True, timeout=60)
    try:
        t0 = time.time()
        out = zarr.open(mnt, mode="r")[:]
        cold = time.time() - t0
        t0 = time.time()
        zarr.open(mnt, mode="r")[:]
        warm = time.time() - t0
        status = json.loads(Path(mnt, ".roifs", "status").read_text())
    finally:
        subprocess.run([ROIFS, "unmount", mnt], timeout=60)
        os.rmdir(mnt)
    ref = reference(img, rois)
    diff = int(np.abs(out.astype(np.int64) - ref.astype(np.int64)).max())
    print(f"\nroifs demo: {len(rois)} ROIs over a {img.shape[0]}x{img.shape[1]} uint16 image")
    print(f"  first read (computes):  {cold:.2f} s   second read (cached): {warm:.2f} s")
    print(f"  processor calls: {status['calls']} (one per ROI)   "
          f"chunks: {status['chunks']['cached']} computed of {status['chunks']['present']}")
    print(f"  largest difference from numpy/scipy computed here: {diff}")
    ok = diff == 0 and status["calls"] == len(rois)
    print("  OK" if ok else "  MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
