"""A roifs worker in Python (config/worker-gaussian.ini): a Gaussian blur with scipy, the same
as the builtin `gaussian`. roifs hands each ROI's read region (the ROI grown by the halo) to
process() and keeps the part inside the ROI, so with a halo of 4 * sigma the blur is seamless.

Run by roifs as `/usr/bin/python3 gaussian_worker.py`; roifs_worker comes with roifs.
"""
import numpy as np
from scipy import ndimage

from roifs_worker import run


def process(block, roi):
    sigma = [float(s) for s in roi.params.get("sigma", "1").split(",")]
    blurred = ndimage.gaussian_filter(block.astype(np.float64),
                                      sigma[0] if len(sigma) == 1 else sigma,
                                      mode="reflect", truncate=4.0)
    if roi.out_dtype.kind in "ui":  # round half to even and clip, like the builtins
        info = np.iinfo(roi.out_dtype)
        blurred = np.clip(np.rint(blurred), info.min, info.max)
    return blurred.astype(roi.out_dtype)


if __name__ == "__main__":
    run(process)
