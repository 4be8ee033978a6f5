"""Random overlapping ROIs over a seeded sample of dtypes, orders, codecs and layouts,
compared exactly with a numpy reference that assigns ROI results in list order."""
import itertools
import json
import os
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numcodecs
import numpy as np
import pytest
import zarr
from numcodecs import GZip, Zlib, Zstd
from numcodecs.blosc import BITSHUFFLE, NOSHUFFLE, SHUFFLE, Blosc

from conftest import (all_chunks, chunk_key, chunk_slices, chunks_touched, make_task,
                      roi_slices)

SEED = 20240611
N_CASES = 26

DTYPES = ["|b1", "|i1", "<i2", ">i4", "<i8", "|u1", "<u2", ">u4", "<u8", "<f2", "<f4", ">f8"]
IN_COMPRESSORS = {
    "raw": lambda: None,
    "blosc-lz4-shuffle": lambda: Blosc("lz4", 5, SHUFFLE),
    "blosc-zstd-bitshuffle": lambda: Blosc("zstd", 3, BITSHUFFLE),
    "blosc-lz4-bitshuffle": lambda: Blosc("lz4", 1, BITSHUFFLE),
    "blosc-zstd-shuffle": lambda: Blosc("zstd", 5, SHUFFLE),
    "zlib": lambda: Zlib(5),
    "gzip": lambda: GZip(5),
    "zstd": lambda: Zstd(3),
}
# name -> ([output] keys, expected .zarray "compressor")
OUT_COMPRESSORS = {
    "none": ({"compressor": "none"}, None),
    "blosc-lz4": ({"compressor": "blosc", "cname": "lz4", "shuffle": "shuffle"},
                  {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": SHUFFLE}),
    "blosc-zstd": ({"compressor": "blosc", "cname": "zstd", "shuffle": "bitshuffle",
                    "clevel": 3},
                   {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": BITSHUFFLE}),
}
PROCS = {"add": [3, 2.5, -7], "copy": [None], "multiply": [0.5, 3, -2], "threshold": [10, 0.5]}

FACTORS = {
    "ndim": [1, 2, 3],
    "dtype": DTYPES,
    "order": ["C", "F"],
    "incomp": list(IN_COMPRESSORS),
    "insep": [".", "/"],
    "outsep": [".", "/"],
    "edge": [True, False],
    "missing": [True, False],
    "proc": list(PROCS),
    "outdtype": ["same", "other"],
    "outchunks": ["same", "other"],
    "outside": ["fill", "input"],
    "outcomp": list(OUT_COMPRESSORS),
    "fill": [0, 7],
    "halo": [False, True],
}


@dataclass
class Case:
    i: int
    ndim: int
    dtype: str
    order: str
    incomp: str
    insep: str
    outsep: str
    edge: bool
    missing: bool
    proc: str
    outdtype: str
    outchunks: str
    outside: str
    outcomp: str
    fill: int
    halo: bool

    @property
    def id(self):
        return (f"{self.i:02d}-{self.ndim}d-{self.dtype}-{self.order}-{self.incomp}-in{self.insep}"
                f"-out{self.outsep}-{'edge' if self.edge else 'even'}"
                f"{'-missing' if self.missing else ''}-{self.proc}-dt_{self.outdtype}"
                f"-ch_{self.outchunks}-{self.outside}-{self.outcomp}-fill{self.fill}"
                f"{'-halo' if self.halo else ''}")


def sample_cases():
    """A fixed, seeded sample in which every value of every factor occurs at least once
    (outside=input forces the output dtype to the input's)."""
    for seed in itertools.count(SEED):
        rng = random.Random(seed)
        cols = {}
        for name, values in FACTORS.items():
            col = (values * (N_CASES // len(values) + 1))[:N_CASES]
            rng.shuffle(col)
            cols[name] = col
        cases = [Case(i, **{k: cols[k][i] for k in FACTORS}) for i in range(N_CASES)]
        for c in cases:
            if c.outside == "input":
                c.outdtype = "same"
        if all({getattr(c, k) for c in cases} == set(v) for k, v in FACTORS.items()):
            return cases


CASES = sample_cases()


# ---------------------------------------------------------------- reference


def cast(r, dtype):
    """float64 result -> output dtype: bool is != 0; integers round half to even, clip."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return r != 0
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(r), info.min, info.max).astype(dtype)
    return r.astype(dtype)


def apply(proc, value, x, out_dtype):
    xf = x.astype(np.float64)
    r = {"copy": lambda: xf, "add": lambda: xf + value, "multiply": lambda: xf * value,
         "threshold": lambda: (xf > value).astype(np.float64)}[proc]()
    return cast(r, out_dtype)


def random_values(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -3000), min(info.max, 3000)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    return (np.round(rng.uniform(-300, 300, size=shape) * 4) / 4).astype(dtype)


def random_shape(rng, c):
    if c.ndim == 1:
        chunks = (int(rng.integers(7, 17)),)
    elif c.ndim == 2:
        chunks = tuple(int(x) for x in rng.integers(4, 11, size=2))
    else:
        chunks = tuple(int(x) for x in rng.integers(3, 6, size=3))
    counts = [int(rng.integers(3, 7)) if c.ndim < 3 else int(rng.integers(2, 5)) for _ in chunks]
    shape = [n * k for n, k in zip(counts, chunks)]
    if c.edge:
        shape = [s - int(rng.integers(1, k)) if k > 1 else s for s, k in zip(shape, chunks)]
        if all(s % k == 0 for s, k in zip(shape, chunks)):
            shape[0] -= 1
    return tuple(shape), chunks


def random_rois(rng, shape, ndim):
    rois = []
    for _ in range(int(rng.integers(5, 13))):
        roi = []
        for s in shape:
            a = int(rng.integers(0, s))
            b = min(s, a + int(rng.integers(1, max(2, s // 3) + 1)))
            roi.append((a, b))
        rois.append(tuple(roi))
    # an exact overlap partner for a random earlier ROI, shifted by one
    base = rois[int(rng.integers(0, len(rois)))]
    rois.append(tuple((max(0, a - 1), max(1, b - 1)) for a, b in base))
    if ndim >= 2:  # one ROI spanning the whole first dimension (written as ":")
        rois.append(((0, shape[0]),) + tuple((a, min(a + 2, s)) for (a, _), s in
                                               zip(rois[0][1:], shape[1:])))
    return rois


@dataclass
class Setup:
    task: object
    shape: tuple
    out_chunks: tuple
    out_dtype: np.dtype
    ref: np.ndarray
    expected_chunks: set
    zarray_expect: dict


def build(tmp_path, c):
    rng = np.random.default_rng(SEED + c.i)
    for _ in range(100):
        shape, chunks = random_shape(rng, c)
        out_chunks = chunks
        if c.outchunks == "other":
            out_chunks = tuple(k + int(rng.integers(1, 4)) if j == 0 else
                               max(1, k - int(rng.integers(0, 2)))
                               for j, k in enumerate(chunks))
        rois = random_rois(rng, shape, c.ndim)
        touched = chunks_touched(rois, shape, out_chunks)
        if c.outside == "input" or len(touched) < len(all_chunks(shape, out_chunks)):
            break
    else:
        raise AssertionError("could not generate ROIs leaving a chunk untouched")

    in_dtype = np.dtype(c.dtype)
    out_dtype = in_dtype
    if c.outdtype == "other":
        out_dtype = np.dtype(rng.choice([d for d in DTYPES if d != c.dtype]))
    data = random_values(rng, in_dtype, shape)
    regions = None
    in_fill = 0
    if c.missing:
        idxs = all_chunks(shape, chunks)
        keep = rng.permutation(len(idxs))[: max(1, len(idxs) // 2)]
        regions = [chunk_slices(idxs[k], shape, chunks) for k in sorted(keep)]
        in_fill = True if in_dtype.kind == "b" else 3
    fill = 0 if out_dtype.kind == "b" else c.fill
    proc_value = PROCS[c.proc][c.i % len(PROCS[c.proc])]
    halo = ",".join(str(int(x)) for x in rng.integers(1, 3, size=c.ndim)) if c.halo else None

    process = {"builtin": c.proc, "threads": 2}
    if proc_value is not None:
        process["param.value"] = proc_value
    out_keys, comp_expect = OUT_COMPRESSORS[c.outcomp]
    output = {"dtype": out_dtype.str if c.outdtype == "other" else None,
              "chunks": ",".join(map(str, out_chunks)) if c.outchunks == "other" else None,
              "fill_value": fill, "outside": c.outside, "dimension_separator": c.outsep,
              **out_keys}
    attrs = {"description": "random roifs test", "case": c.i, "nested": {"a": [1, 2]}}
    task = make_task(tmp_path, data, chunks, rois=rois, process=process, output=output,
                     compressor=IN_COMPRESSORS[c.incomp](), order=c.order,
                     dimension_separator=c.insep, fill_value=in_fill, attrs=attrs,
                     regions=regions, sections={"rois": {"halo": halo}})
    if c.missing:
        present = sum(1 for _, _, files in os.walk(task.input) for f in files
                      if not f.startswith("."))
        assert present < len(all_chunks(shape, chunks)), "test bug: no input chunk is missing"

    inp = task.inp
    ref = inp.copy() if c.outside == "input" else np.full(shape, fill, out_dtype)
    for roi in rois:
        sl = roi_slices(roi)
        ref[sl] = apply(c.proc, proc_value, inp[sl], out_dtype)
    expected_chunks = (set(all_chunks(shape, out_chunks)) if c.outside == "input" else touched)
    zarray = {"zarr_format": 2, "shape": list(shape), "chunks": list(out_chunks),
              "dtype": out_dtype.str, "compressor": comp_expect, "order": "C",
              "filters": None, "dimension_separator": c.outsep}
    return Setup(task, shape, out_chunks, out_dtype, ref, expected_chunks, zarray), attrs, fill


def listed_chunk_files(mnt):
    """Relative paths of all chunk files under mnt (metadata and .roifs excluded)."""
    out = set()
    for root, dirs, files in os.walk(mnt):
        dirs[:] = [d for d in dirs if d != ".roifs"]
        rel = os.path.relpath(root, mnt)
        for f in files:
            if rel == "." and f in (".zarray", ".zattrs"):
                continue
            out.add(f if rel == "." else os.path.join(rel, f))
    return out


def check_metadata(m, s, attrs, fill):
    meta = json.loads((m.path / ".zarray").read_text())
    for k, v in s.zarray_expect.items():
        if k == "compressor" and v is not None:
            assert isinstance(meta.get(k), dict), meta
            assert {kk: meta[k].get(kk) for kk in v} == v, meta[k]
        else:
            assert meta.get(k) == v, f".zarray {k}: {meta.get(k)!r} != {v!r}"
    fv = meta["fill_value"]
    assert fv is not None and not isinstance(fv, str) and float(fv) == float(fill), fv
    zattrs = json.loads((m.path / ".zattrs").read_text())
    assert {k: zattrs.get(k) for k in attrs} == attrs
    assert "roifs" in zattrs


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_random(tmp_path, mount, case):
    s, attrs, fill = build(tmp_path, case)
    sep = case.outsep
    all_idx = all_chunks(s.shape, s.out_chunks)
    with mount(s.task.config) as m:
        check_metadata(m, s, attrs, fill)

        # existence and listing come from the ROI index alone: nothing is computed
        for idx in all_idx:
            exists = os.path.exists(m.path / chunk_key(idx, sep))
            assert exists == (idx in s.expected_chunks), f"chunk {idx}: exists={exists}"
        assert listed_chunk_files(m.path) == {chunk_key(i, sep) for i in s.expected_chunks}
        top = set(os.listdir(m.path))
        assert {".zarray", ".zattrs", ".roifs"} <= top
        assert m.status()["calls"] == 0, "stat/readdir computed something"

        z = zarr.open(str(m.path), mode="r")
        assert z.shape == s.shape and z.dtype == s.out_dtype
        order = list(all_idx)
        random.Random(case.i).shuffle(order)
        slices = [chunk_slices(idx, s.shape, s.out_chunks) for idx in order]
        out = np.empty(s.shape, s.out_dtype)
        with ThreadPoolExecutor(8) as pool:
            for sl, block in zip(slices, pool.map(lambda sl: z[sl], slices)):
                out[sl] = block
        bad = np.argwhere(out != s.ref)
        assert bad.size == 0, (f"{len(bad)} elements differ, e.g. at {bad[:5].tolist()}: "
                               f"got {[out[tuple(b)] for b in bad[:5]]}, "
                               f"want {[s.ref[tuple(b)] for b in bad[:5]]}")

        st = m.status()
        n = len(s.task.rois)
        assert st["rois"]["total"] == n and st["rois"]["done"] == n, st["rois"]
        assert st["rois"]["failed"] == 0 and st["calls"] == n, st
        assert st["chunks"]["total"] == len(all_idx), st["chunks"]
        assert st["chunks"]["present"] == len(s.expected_chunks), st["chunks"]
        assert st["chunks"]["cached"] == len(s.expected_chunks), st["chunks"]


def test_cases_cover_every_value():
    for name, values in FACTORS.items():
        assert {getattr(c, name) for c in CASES} == set(values), name
