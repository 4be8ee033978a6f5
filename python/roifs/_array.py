"""What a `python =` function sees and returns (docs/processors.md, Python functions): the `roi`
argument, the cast of its result to the output dtype (as roifs's builtins cast), and the one-line
description of an exception that goes into the status file."""

import os
import sysconfig
import traceback

import numpy as np

__all__ = ["Roi", "store", "describe"]


class Roi:
    """The ROI being computed.

    index     ROI index (its 0-based line in the ROI list)
    start     ROI box start, a tuple of ints per dimension
    stop      ROI box stop (exclusive)
    in_start  read region start: the box grown by the halo, clipped to the array
    in_shape  read region shape, which is block.shape
    dtype     numpy dtype of block (the input's)
    out_dtype numpy dtype of the result
    params    {name: value} of the task's param.* keys, values as strings
    label     the object's label for a masked ROI, else None
    out       a writable array of in_shape and out_dtype in the memory roifs reads the
              result from: a function that fills it and returns it saves one copy
    """

    __slots__ = ("index", "start", "stop", "in_start", "in_shape", "dtype", "out_dtype",
                 "params", "label", "out")

    def __init__(self, index, start, stop, in_start, in_shape, dtype, out_dtype, params,
                 label=None, out=None):
        self.index = index
        self.start = start
        self.stop = stop
        self.in_start = in_start
        self.in_shape = in_shape
        self.dtype = dtype
        self.out_dtype = out_dtype
        self.params = params
        self.label = label
        self.out = out

    @property
    def inner(self):
        """Slices selecting the ROI box inside block (they differ with a halo)."""
        return tuple(slice(a - s, b - s) for a, b, s in zip(self.start, self.stop, self.in_start))

    def __repr__(self):
        return (f"Roi(index={self.index}, start={self.start}, stop={self.stop}, "
                f"in_start={self.in_start}, in_shape={self.in_shape}, label={self.label})")


class ResultError(ValueError):
    """The function's result cannot be stored (wrong shape, or not a real number type)."""


def _int_bounds(dt):
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


def _store_from_float(r, out, lo, hi):
    """Rounded half to even, NaN to 0, clipped to [lo, hi] (64-bit bounds are not exact
    in floating point: values at or past them are set afterwards)."""
    ftype = np.longdouble if r.dtype == np.longdouble else np.float64
    t = np.rint(r, dtype=ftype)
    np.copyto(t, 0, where=np.isnan(t))
    flo, fhi = ftype(lo), ftype(hi)
    np.clip(t, flo, fhi, out=t)
    if out.dtype.itemsize < 8:
        np.copyto(out, t, casting="unsafe")
        return
    big, small = t >= fhi, t <= flo
    np.copyto(t, 0, where=big | small)
    np.copyto(out, t, casting="unsafe")
    out[big] = hi
    out[small] = lo


def store(result, out):
    """Writes result into out (the output array) cast as roifs's builtins cast: floats
    rounded to nearest (half to even), then clipped to the range of an integer output, NaN
    stored as 0; integers clipped; anything to bool is `!= 0`. A result that is out itself
    is left as it is."""
    if result is out:
        return
    r = np.asarray(result)
    if r.shape != out.shape:
        raise ResultError(f"the function returned an array of shape {r.shape}, expected "
                          f"{out.shape} (the read region)")
    odt = out.dtype
    if r.dtype == odt:
        np.copyto(out, r)
        return
    k, ok = r.dtype.kind, odt.kind
    if k not in "biuf":
        raise ResultError(f"the function returned {r.dtype}, which roifs cannot store as "
                          f"{odt} (expected booleans, integers or floats)")
    if ok == "f" or (ok == k == "b"):
        np.copyto(out, r, casting="unsafe")
    elif ok == "b":
        np.not_equal(r, 0, out=out)
    elif k == "f":
        _store_from_float(r, out, *_int_bounds(odt))
    elif k == "b" or np.can_cast(r.dtype, odt, "safe"):
        np.copyto(out, r, casting="unsafe")
    else:  # an integer result wider than the output: clipped, never wrapped
        lo, hi = _int_bounds(odt)
        rlo, rhi = _int_bounds(r.dtype)
        np.copyto(out, np.clip(r, r.dtype.type(max(lo, rlo)), r.dtype.type(min(hi, rhi))),
                  casting="unsafe")


def _library_dirs(_dirs=[]):
    if not _dirs:
        paths = sysconfig.get_paths()
        _dirs.extend(os.path.realpath(paths[k]) + os.sep
                     for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
        _dirs.append(os.path.dirname(os.path.realpath(__file__)) + os.sep)
    return tuple(_dirs)


def _is_library(path):
    """True for Python's own modules, installed packages and roifs's."""
    parts = path.split(os.sep)
    return path.startswith(_library_dirs()) or "site-packages" in parts or \
        "dist-packages" in parts


def describe(exc):
    """'ValueError: message (script.py:12)', naming the innermost frame of the traceback in
    the user's code rather than in a library (no frame when roifs itself raised)."""
    msg = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        # "<stdin>", "<string>", but also numpy's "<__array_function__ internals>": skipped
        if not frame.filename.startswith("<") and \
                not _is_library(os.path.realpath(frame.filename)):
            return text + f" ({os.path.basename(frame.filename)}:{frame.lineno})"
    return text
