"""Zarr v3 (SPEC §3 [output] format/shard, §5): v3 inputs of several data types and codecs
(transpose, big-endian bytes, blosc, gzip, zstd, crc32c, shards with the index at either end
and empty inner chunks) mounted with format 2 and format 3 outputs, and v3 outputs, sharded
or not, read back by zarrita.js, the independent implementation.

The v3 input fixtures are written here (zarr.json per the spec, numcodecs for the
compressors, our own crc32c and shard layout), and each one is used only after zarrita.js
has read it back to the expected values. zarr-python 2 writes the v2 inputs and reads the
format 2 outputs.
"""
import errno
import itertools
import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import Blosc, GZip, Zstd

from conftest import make_task, roi_slices, roi_text, run_roifs, write_config, zarrita_node

REPO = Path(__file__).resolve().parents[2]
JS = REPO / "tests" / "js"
EMPTY = 2**64 - 1

# ---------------------------------------------------------------- zarrita.js


@pytest.fixture(scope="session")
def zarrita():
    """Installs tests/js (package-lock.json) when needed; returns the zarrita.js version."""
    zarrita_node()
    return json.loads((JS / "node_modules" / "zarrita" / "package.json").read_text())["version"]


JS_DTYPES = {"bool": "|b1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
             "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
             "float32": "<f4", "float64": "<f8"}


def zarrita_read(path, tmp_path):
    """The whole array at path as zarrita.js reads it (a numpy array)."""
    out = Path(tmp_path) / f"zarrita-{os.getpid()}-{abs(hash(str(path)))}.bin"
    r = subprocess.run(["node", str(JS / "read_zarr.mjs"), str(path), str(out)],
                       capture_output=True, text=True, timeout=60, cwd=str(JS))
    assert r.returncode == 0, f"zarrita.js could not read {path}:\n{r.stderr[-3000:]}"
    info = json.loads(r.stdout.strip().splitlines()[-1])
    flat = np.fromfile(out, dtype=JS_DTYPES[info["data_type"]])
    out.unlink()
    strides = [s * flat.itemsize for s in info["stride"]]
    return np.ascontiguousarray(np.lib.stride_tricks.as_strided(flat, info["shape"], strides))


def assert_same(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind == "f":
        ok = np.array_equal(got, want, equal_nan=True)
    else:
        ok = np.array_equal(got, want)
    if not ok:
        bad = np.argwhere(~((got == want) | (np.isnan(got) & np.isnan(want))
                            if want.dtype.kind == "f" else got == want))
        i = tuple(bad[0])
        pytest.fail(f"{what}: {len(bad)} elements differ, first at {i}: {got[i]!r} != {want[i]!r}")


# ---------------------------------------------------------------- a v3 writer for fixtures

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ CRC_TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def codec_parts(c):
    return (c, {}) if isinstance(c, str) else (c["name"], c.get("configuration", {}))


def encode_chain(a, codecs):
    """Encodes the chunk array a with a v3 codec list (no sharding)."""
    data = None
    itemsize = a.dtype.itemsize
    for c in codecs:
        name, conf = codec_parts(c)
        if name == "transpose":
            a = np.ascontiguousarray(a.transpose(conf["order"]))
        elif name == "bytes":
            order = ">" if conf.get("endian") == "big" else "<"
            data = a.astype(a.dtype.newbyteorder(order)).tobytes()
        elif name == "blosc":
            shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[conf["shuffle"]]
            codec = Blosc(conf["cname"], conf["clevel"], shuffle, conf.get("blocksize", 0))
            data = codec.encode(np.frombuffer(data, dtype=f"u{itemsize}"))  # typesize = itemsize
        elif name == "gzip":
            data = GZip(conf["level"]).encode(data)
        elif name == "zstd":
            data = Zstd(conf["level"]).encode(data)
        elif name == "crc32c":
            data = data + struct.pack("<I", crc32c(data))
        else:
            raise AssertionError(f"test writer: codec {name}")
    return bytes(data)


def encode_shard(shard, conf, fill):
    """A shard: inner chunks equal to fill are stored empty."""
    inner = conf["chunk_shape"]
    cps = [s // i for s, i in zip(shard.shape, inner)]
    entries = np.full(cps + [2], EMPTY, dtype=np.uint64)
    n_crc = sum(codec_parts(c)[0] == "crc32c" for c in conf["index_codecs"])
    index_len = 16 * int(np.prod(cps)) + 4 * n_crc
    at_start = conf.get("index_location", "end") == "start"
    data = bytearray()
    fill_block = np.full(inner, fill, dtype=shard.dtype).tobytes()
    for ci in itertools.product(*map(range, cps)):
        block = shard[tuple(slice(c * i, (c + 1) * i) for c, i in zip(ci, inner))]
        if block.tobytes() == fill_block:
            continue
        enc = encode_chain(block, conf["codecs"])
        entries[ci] = ((index_len if at_start else 0) + len(data), len(enc))
        data += enc
    index = encode_chain(entries, conf["index_codecs"])
    assert len(index) == index_len
    return index + bytes(data) if at_start else bytes(data) + index


def fill_scalar(dtype, fill):
    """The numpy value of a v3 fill_value."""
    dtype = np.dtype(dtype)
    if isinstance(fill, str) and fill.startswith("0x"):
        return np.frombuffer(int(fill, 16).to_bytes(dtype.itemsize, "little"), dtype)[0]
    if isinstance(fill, str):
        return dtype.type({"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[fill])
    return dtype.type(fill)


def chunk_key(idx, encoding):
    name, sep = encoding
    return ("c" + "".join(sep + str(i) for i in idx)) if name == "default" \
        else sep.join(map(str, idx))


def write_v3(path, data, chunk_shape, codecs, *, fill_value=0, key_encoding=("default", "/"),
             attributes=None, dimension_names=None, missing=()):
    """Writes data as a v3 array; chunks (or shards) whose index is in missing are absent.
    Returns the array as a reader must see it (fill where chunks are missing)."""
    path = Path(path)
    path.mkdir(parents=True)
    dtype_name = {np.dtype(v).str: k for k, v in JS_DTYPES.items()}[data.dtype.str]
    meta = {"zarr_format": 3, "node_type": "array", "shape": list(data.shape),
            "data_type": dtype_name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
            "chunk_key_encoding": {"name": key_encoding[0],
                                   "configuration": {"separator": key_encoding[1]}},
            "fill_value": fill_value, "codecs": codecs, "attributes": attributes or {}}
    if dimension_names is not None:
        meta["dimension_names"] = dimension_names
    (path / "zarr.json").write_text(json.dumps(meta, indent=2))
    fill = fill_scalar(data.dtype, fill_value)
    expected = data.copy()
    sharded = codec_parts(codecs[0])[0] == "sharding_indexed"
    for idx in itertools.product(*[range(-(-s // c)) for s, c in zip(data.shape, chunk_shape)]):
        region = tuple(slice(i * c, min((i + 1) * c, s))
                       for i, c, s in zip(idx, chunk_shape, data.shape))
        if idx in missing:
            expected[region] = fill
            continue
        block = np.full(chunk_shape, fill, dtype=data.dtype)
        block[tuple(slice(0, r.stop - r.start) for r in region)] = data[region]
        enc = (encode_shard(block, codecs[0]["configuration"], fill) if sharded
               else encode_chain(block, codecs))
        key = path / chunk_key(idx, key_encoding)
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(enc)
    return expected


def index_to_end(src, dst):
    """Copies a sharded array whose index is at the start to one with it at the end (what
    zarrita.js reads): a check of the start layout by an independent reader."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "zarr.json").read_text())
    conf = meta["codecs"][0]["configuration"]
    assert conf["index_location"] == "start"
    conf["index_location"] = "end"
    (dst / "zarr.json").write_text(json.dumps(meta))
    cps = [s // i for s, i in zip(meta["chunk_grid"]["configuration"]["chunk_shape"],
                                  conf["chunk_shape"])]
    index_len = 16 * int(np.prod(cps)) + 4
    for f in (dst / "c").rglob("*"):
        if f.is_file():
            raw = f.read_bytes()
            index, body = raw[:index_len], raw[index_len:]
            assert struct.unpack("<I", index[-4:])[0] == crc32c(index[:-4])
            e = np.frombuffer(index[:-4], dtype="<u8").reshape(-1, 2).copy()
            present = e[:, 0] != EMPTY
            e[present, 0] -= np.uint64(index_len)
            f.write_bytes(body + encode_chain(e, conf["index_codecs"]))


# ---------------------------------------------------------------- fixtures

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
BYTES_BE = {"name": "bytes", "configuration": {"endian": "big"}}
CRC32C = {"name": "crc32c"}  # (zarrita.js does not take the v3.1 bare-name short-hand)
BYTES = {"name": "bytes"}  # no endian: one-byte types only
INDEX = [BYTES_LE, CRC32C]


def shard_codec(inner, codecs, location="end", index=INDEX):
    return [{"name": "sharding_indexed",
             "configuration": {"chunk_shape": list(inner), "codecs": codecs,
                               "index_codecs": index, "index_location": location}}]


def rng_data(dtype, shape, rng):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    lo = max(np.iinfo(dtype).min, -(2**40))
    hi = min(np.iinfo(dtype).max, 2**40)
    return rng.integers(lo, hi, shape, dtype=dtype, endpoint=True)


# name -> (dtype, shape, chunk (or shard) shape, codecs, extra write_v3 arguments)
INPUTS = {
    "uint16-gzip": ("<u2", (13, 11), (4, 5), [BYTES_LE, {"name": "gzip",
                                                        "configuration": {"level": 5}}],
                    dict(missing={(1, 1)}, attributes={"name": "cells"},
                         dimension_names=["y", "x"])),
    "int32-transpose-bigendian-zstd-crc32c": (
        "<i4", (6, 7, 9), (4, 3, 5),
        [{"name": "transpose", "configuration": {"order": [2, 0, 1]}}, BYTES_BE,
         {"name": "zstd", "configuration": {"level": 3, "checksum": False}}, CRC32C],
        dict(fill_value=-5, key_encoding=("default", "."), missing={(1, 2, 1)},
             dimension_names=["z", None, "x"])),
    "float32-blosc-v2keys-nan": (
        "<f4", (9, 10), (4, 4),
        [BYTES_LE, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                                       "shuffle": "shuffle", "typesize": 4,
                                                       "blocksize": 0}}],
        dict(fill_value="NaN", key_encoding=("v2", "."), missing={(0, 1)})),
    "float64-crc32c-hexfill-v2nested": (
        "<f8", (14,), (4,), [BYTES_LE, CRC32C],
        dict(fill_value="0x4059000000000000", key_encoding=("v2", "/"), missing={(2,)})),
    "uint8-sharded-gzip": (
        "|u1", (10, 13), (4, 6), shard_codec((2, 3), [BYTES, {"name": "gzip",
                                                              "configuration": {"level": 1}}]),
        dict(fill_value=9, missing={(2, 1)}, dimension_names=["a", "b"])),
    "int64-sharded-indexstart-transpose-blosc": (
        "<i8", (9, 8), (6, 4),
        shard_codec((3, 2), [{"name": "transpose", "configuration": {"order": [1, 0]}},
                             BYTES_BE,
                             {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3,
                                                                 "shuffle": "bitshuffle",
                                                                 "typesize": 8,
                                                                 "blocksize": 0}}],
                    location="start"),
        dict(fill_value=-1)),
    "bool-sharded-zstd": (
        "|b1", (7, 5, 6), (4, 5, 6),
        shard_codec((2, 5, 3), [BYTES, {"name": "zstd", "configuration": {"level": 1}}]),
        dict(fill_value=False)),
    "uint64-sharded-bigendian-index": (
        "<u8", (12, 7), (12, 7),
        shard_codec((3, 7), [BYTES_BE, CRC32C], index=[BYTES_BE, CRC32C]),
        dict(fill_value=3)),
}


def make_v3_input(tmp_path, name, rng):
    dtype, shape, chunks, codecs, kw = INPUTS[name]
    data = rng_data(dtype, shape, rng)
    fill = fill_scalar(dtype, kw.get("fill_value", 0))
    # stretches of fill value, so that sharded inputs get empty inner chunks
    data[tuple(slice(0, max(1, s // 3)) for s in shape)] = fill
    path = Path(tmp_path) / "in.zarr"
    expected = write_v3(path, data, chunks, codecs, **kw)
    return path, expected, kw


def verify_fixture(path, expected, kw, tmp_path):
    """zarrita.js must read the fixture back to the expected values (the check that the test
    writer follows the spec). zarrita.js reads shard indexes at the end only, so a start
    index is checked on a copy with the index moved; it does not parse hex fill values, so
    missing chunks are compared only when the fill value is not hex."""
    src = path
    meta = json.loads((path / "zarr.json").read_text())
    if meta["codecs"][0].get("configuration", {}).get("index_location") == "start":
        src = Path(tmp_path) / "in-index-end.zarr"
        index_to_end(path, src)
    got = zarrita_read(src, tmp_path)
    fill = kw.get("fill_value", 0)
    if isinstance(fill, str) and fill.startswith("0x"):
        mask = np.ones(expected.shape, bool)
        chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
        for idx in kw.get("missing", ()):
            mask[tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks))] = False
        assert_same(got[mask], expected[mask], f"zarrita.js reading {path.name}")
    else:
        assert_same(got, expected, f"zarrita.js reading {path.name}")


# ---------------------------------------------------------------- tasks over v3 inputs

def random_rois(shape, rng, n=3):
    rois = []
    for _ in range(n):
        roi = []
        for s in shape:
            a = int(rng.integers(0, s))
            b = int(rng.integers(a + 1, s + 1))
            roi.append((a, b))
        rois.append(tuple(roi))
    return rois


def add_reference(a, value):
    """builtin add: computed in double, then numpy-style cast with clipping."""
    r = a.astype(np.float64) + value
    if a.dtype.kind in "iu":
        info = np.iinfo(a.dtype)
        r = np.clip(np.rint(r), info.min, info.max)
    return r.astype(a.dtype)


def expected_output(inp, rois, process, outside_input, fill):
    out = inp.copy() if outside_input else np.full(inp.shape, fill, dtype=inp.dtype)
    for roi in rois:
        s = roi_slices(roi)
        out[s] = inp[s] if process == "copy" else add_reference(inp[s], 3)
    return out


def write_task(tmp_path, shape, rois, process, output, outside_input):
    rois_file = Path(tmp_path) / "rois.txt"
    rois_file.write_text("\n".join(roi_text(r, shape) for r in rois) + "\n")
    proc = {"builtin": "copy"} if process == "copy" else {"builtin": "add", "param.value": 3}
    out = dict(output)
    if outside_input:
        out["outside"] = "input"
    config = Path(tmp_path) / "task.ini"
    write_config(config, {"input": {"path": "in.zarr"}, "rois": {"file": "rois.txt"},
                          "process": {**proc, "threads": 2}, "output": out,
                          "cache": {"dir": str(Path(tmp_path) / "cache")}})
    return config


OUTPUTS = {
    "v2-none": {"format": 2},
    "v2-zstd": {"format": 2, "compressor": "zstd", "dimension_separator": "/"},
    "v3-none": {"format": 3},
    "v3-gzip": {"format": 3, "compressor": "gzip"},
    "v3-sharded": {"format": 3, "shard": "2x"},
    "v3-sharded-blosc": {"format": 3, "shard": "2x", "compressor": "blosc", "cname": "zstd",
                         "shuffle": "bitshuffle"},
}
# each input with two outputs (one format 2, one format 3), covering every output once or more
CASES = [("uint16-gzip", "v2-none", "v3-sharded"),
         ("int32-transpose-bigendian-zstd-crc32c", "v2-zstd", "v3-gzip"),
         ("float32-blosc-v2keys-nan", "v2-none", "v3-sharded-blosc"),
         ("float64-crc32c-hexfill-v2nested", "v2-zstd", "v3-none"),
         ("uint8-sharded-gzip", "v2-none", "v3-sharded"),
         ("int64-sharded-indexstart-transpose-blosc", "v2-zstd", "v3-sharded-blosc"),
         ("bool-sharded-zstd", "v2-none", "v3-gzip"),
         ("uint64-sharded-bigendian-index", "v2-zstd", "v3-sharded")]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name,out2,out3", CASES, ids=[c[0] for c in CASES])
def test_v3_input(tmp_path, mount, zarrita, name, out2, out3):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    path, inp, kw = make_v3_input(tmp_path, name, rng)
    verify_fixture(path, inp, kw, tmp_path)
    meta = json.loads((path / "zarr.json").read_text())
    read_chunks = (meta["codecs"][0]["configuration"]["chunk_shape"]
                   if meta["codecs"][0]["name"] == "sharding_indexed"
                   else meta["chunk_grid"]["configuration"]["chunk_shape"])
    for i, out_name in enumerate((out2, out3)):
        case_dir = Path(tmp_path) / out_name
        case_dir.mkdir()
        os.symlink(path, case_dir / "in.zarr")
        process = "copy" if inp.dtype.kind == "b" else ("add" if i else "copy")
        outside_input = i == 0 or inp.dtype.kind == "b"
        rois = random_rois(inp.shape, rng)
        output = dict(OUTPUTS[out_name])
        if output.get("shard") == "2x":
            output["shard"] = ",".join(str(2 * c) for c in read_chunks)
        fill = np.zeros((), inp.dtype)[()]
        config = write_task(case_dir, inp.shape, rois, process, output, outside_input)
        want = expected_output(inp, rois, process, outside_input, fill)
        with mount(config) as m:
            if output["format"] == 2:
                z = zarr.open(str(m.path), mode="r")
                assert z.chunks == tuple(read_chunks)  # the input's (inner) chunks by default
                got = z[...]
                assert_same(zarrita_read(m.path, tmp_path), want, f"zarrita.js reading {out_name}")
            else:
                zj = json.loads((m.path / "zarr.json").read_text())
                assert zj["attributes"]["roifs"]["rois"] == len(rois)
                for k, v in (kw.get("attributes") or {}).items():
                    assert zj["attributes"][k] == v
                if "dimension_names" in kw:  # the input's, carried over
                    assert zj["dimension_names"] == kw["dimension_names"]
                else:
                    assert "dimension_names" not in zj
                got = zarrita_read(m.path, tmp_path)
            assert_same(got, want, f"{name} mounted as {out_name}")


# ---------------------------------------------------------------- v3 outputs

SHAPE, CHUNKS = (12, 10, 9), (4, 5, 3)
SHARD = (8, 10, 6)
ROIS = [((0, 5), (0, 10), (0, 9)), ((3, 12), (2, 7), (4, 8)), ((9, 11), (0, 3), (0, 2))]


def v2_task(tmp_path, output, dtype="<i2", rois=ROIS, attrs=None):
    data = np.arange(np.prod(SHAPE), dtype=np.int64).reshape(SHAPE).astype(dtype)
    return make_task(tmp_path, data, CHUNKS, rois=rois, attrs=attrs,
                     process={"builtin": "add", "param.value": 3, "threads": 2},
                     output={"format": 3, **output})


def reference(task, dtype=None, fill=0):
    out = np.full(SHAPE, fill, dtype=dtype or task.inp.dtype)
    for roi in task.rois:
        out[roi_slices(roi)] = add_reference(task.inp[roi_slices(roi)], 3).astype(out.dtype)
    return out


def shard_files(mnt):
    return sorted(p for p in (Path(mnt) / "c").rglob("*") if p.is_file())


def read_index_suffix(path, n_inner):
    """The shard index read the way zarr-python 3 and zarrita.js read it: seek(-N, SEEK_END)."""
    n = 16 * n_inner + 4
    with open(path, "rb") as f:
        f.seek(-n, os.SEEK_END)
        raw = f.read(n)
        size = f.seek(0, os.SEEK_END)
    assert len(raw) == n
    assert struct.unpack("<I", raw[-4:])[0] == crc32c(raw[:-4]), f"{path}: index checksum"
    return np.frombuffer(raw[:-4], dtype="<u8").reshape(n_inner, 2), size


@pytest.mark.timeout(180)
def test_sharded_output_fixed_size(tmp_path, mount, zarrita):
    task = v2_task(tmp_path, {"chunks": ",".join(map(str, CHUNKS)),
                              "shard": ",".join(map(str, SHARD))},
                   attrs={"omero": {"name": "x"}})
    want = reference(task)
    n_inner = int(np.prod([s // c for s, c in zip(SHARD, CHUNKS)]))
    inner_bytes = int(np.prod(CHUNKS)) * 2
    size = n_inner * inner_bytes + 16 * n_inner + 4
    with mount(task.config) as m:
        assert sorted(os.listdir(m.path)) == [".roifs", "c", "zarr.json"]
        for gone in (".zarray", ".zattrs", "c.0.0.0", "0.0.0"):
            assert not os.path.exists(m.path / gone)
        zj = json.loads((m.path / "zarr.json").read_text())
        assert zj["chunk_grid"]["configuration"]["chunk_shape"] == list(SHARD)
        assert zj["chunk_key_encoding"] == {"name": "default",
                                            "configuration": {"separator": "/"}}
        sh = zj["codecs"][0]
        assert sh["name"] == "sharding_indexed"
        assert sh["configuration"]["chunk_shape"] == list(CHUNKS)
        assert sh["configuration"]["index_location"] == "end"
        assert sh["configuration"]["index_codecs"] == [BYTES_LE, CRC32C]
        assert sh["configuration"]["codecs"] == [BYTES_LE]
        assert zj["attributes"]["omero"] == {"name": "x"}
        assert zj["attributes"]["roifs"]["rois"] == len(ROIS)
        files = shard_files(m.path)
        assert [str(p.relative_to(m.path)) for p in files] == ["c/0/0/0", "c/0/0/1", "c/1/0/0",
                                                               "c/1/0/1"]
        # exact before anything is computed
        assert all(os.stat(p).st_size == size for p in files)
        assert m.status()["calls"] == 0
        # suffix read of the index of a shard nobody opened before
        entries, got_size = read_index_suffix(files[1], n_inner)
        assert got_size == size
        assert list(entries[:, 1]) == [inner_bytes] * n_inner  # fixed size: all present
        assert sorted(entries[:, 0]) == [k * inner_bytes for k in range(n_inner)]
        raw = files[1].read_bytes()
        cps = [s // c for s, c in zip(SHARD, CHUNKS)]
        for k, ci in enumerate(itertools.product(*map(range, cps))):
            off = int(entries[k, 0])
            block = np.frombuffer(raw[off:off + inner_bytes], "<i2")
            lo = [ci[0] * CHUNKS[0], ci[1] * CHUNKS[1], SHARD[2] + ci[2] * CHUNKS[2]]  # c/0/0/1
            exp = np.zeros(CHUNKS, "<i2")
            part = want[lo[0]:lo[0] + CHUNKS[0], lo[1]:lo[1] + CHUNKS[1], lo[2]:lo[2] + CHUNKS[2]]
            exp[tuple(slice(0, s) for s in part.shape)] = part
            assert np.array_equal(block.reshape(CHUNKS), exp), f"inner chunk {ci}"
        assert_same(zarrita_read(m.path, tmp_path), want, "zarrita.js reading the shards")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("compressor", ["blosc", "gzip", "zstd"])
def test_sharded_output_compressed(tmp_path, mount, zarrita, compressor):
    task = v2_task(tmp_path, {"chunks": ",".join(map(str, CHUNKS)),
                              "shard": ",".join(map(str, SHARD)), "compressor": compressor,
                              "fill_value": 7})
    want = reference(task, fill=7)
    n_inner = int(np.prod([s // c for s, c in zip(SHARD, CHUNKS)]))
    with mount(task.config) as m:
        zj = json.loads((m.path / "zarr.json").read_text())
        inner_codecs = zj["codecs"][0]["configuration"]["codecs"]
        assert inner_codecs[0] == BYTES_LE and inner_codecs[1]["name"] == compressor
        if compressor == "blosc":
            assert inner_codecs[1]["configuration"] == {"cname": "lz4", "clevel": 5,
                                                        "shuffle": "shuffle", "typesize": 2,
                                                        "blocksize": 0}
        files = shard_files(m.path)
        bound = {p: os.stat(p).st_size for p in files}  # an upper bound until opened
        empty_seen = 0
        for p in files:
            with open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read()
            assert size == len(data) > 0 and os.stat(p).st_size == size
            assert size <= bound[p]
            entries, got_size = read_index_suffix(p, n_inner)
            assert got_size == size
            for off, n in entries:
                if off == EMPTY:
                    assert n == EMPTY
                    empty_seen += 1
                else:
                    assert off + n <= size - (16 * n_inner + 4)
        assert empty_seen > 0  # inner chunks of fill only are stored empty
        assert_same(zarrita_read(m.path, tmp_path), want, f"zarrita.js reading {compressor} shards")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("output,dtype", [
    ({}, "<i2"),
    ({"compressor": "blosc", "cname": "zstd", "shuffle": "noshuffle", "clevel": 0}, "<u4"),
    ({"compressor": "gzip", "dtype": ">i4"}, "<i2"),
    ({"compressor": "zstd", "dtype": "float32", "fill_value": "nan",
      "dimension_separator": "."}, "<i2"),
], ids=["none", "blosc-clevel0", "gzip-bigendian", "zstd-float-nan-dotkeys"])
def test_unsharded_output(tmp_path, mount, zarrita, output, dtype):
    task = v2_task(tmp_path, output, dtype=dtype)
    out_dtype = np.dtype({"float32": "<f4"}.get(output.get("dtype"), output.get("dtype", dtype)))
    fill = np.nan if output.get("fill_value") == "nan" else 0
    want = reference(task, dtype=out_dtype.newbyteorder("<"), fill=fill)
    dot = output.get("dimension_separator") == "."
    with mount(task.config) as m:
        zj = json.loads((m.path / "zarr.json").read_text())
        assert zj["zarr_format"] == 3 and zj["node_type"] == "array"
        assert zj["chunk_grid"]["configuration"]["chunk_shape"] == list(CHUNKS)
        assert zj["chunk_key_encoding"]["configuration"]["separator"] == ("." if dot else "/")
        assert zj["codecs"][0] == {"name": "bytes", "configuration": {
            "endian": "big" if out_dtype.byteorder == ">" else "little"}}
        assert len(zj["codecs"]) == (1 if "compressor" not in output else 2)
        if output.get("fill_value") == "nan":
            assert zj["fill_value"] == "NaN" and zj["data_type"] == "float32"
        names = sorted(os.listdir(m.path))
        if dot:
            assert "c.0.0.0" in names and "c" not in names
            first = m.path / "c.0.0.0"
        else:
            assert names == [".roifs", "c", "zarr.json"]
            first = m.path / "c" / "0" / "0" / "0"
        fixed = "compressor" not in output or output.get("clevel") == 0
        raw_bytes = int(np.prod(CHUNKS)) * out_dtype.itemsize
        st = os.stat(first).st_size
        if fixed:
            assert st == raw_bytes + (16 if "compressor" in output else 0)
        else:
            assert st >= raw_bytes  # an upper bound until the open (test_size_contract.py)
        with open(first, "rb") as f:
            assert os.fstat(f.fileno()).st_size == len(f.read()) <= st
        assert_same(zarrita_read(m.path, tmp_path), want, "zarrita.js reading the v3 output")


def test_v3_config_errors(tmp_path, roifs_bin):
    cases = [({"compressor": "zlib"}, "compressor", "zlib is not a Zarr v3 codec"),
             ({"shard": "8,10,4"}, "shard", "not a multiple of chunks"),
             ({"shard": "8,10"}, "shard", "2 entries")]
    for i, (output, key, words) in enumerate(cases):
        task = v2_task(Path(tmp_path) / str(i), output)
        r = run_roifs(roifs_bin, "check", task.config)
        line = next(n for n, l in enumerate(task.config.read_text().splitlines(), 1)
                    if l.startswith(key))
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("roifs: ") and f"task.ini:{line}:" in r.stderr, r.stderr
        assert words in r.stderr, r.stderr


BAD_INPUTS = [
    ([BYTES_LE, {"name": "lz4", "configuration": {}}], {}, 'codec "lz4" is not supported'),
    ([BYTES_LE], {"extension_x": {"name": "x"}}, '"extension_x": unknown extension'),
    ([{"name": "bytes"}], {}, 'needs "endian"'),
    ([BYTES_LE], {"storage_transformers": [{"name": "x"}]}, "storage transformers"),
]


@pytest.mark.parametrize("codecs,extra,words", BAD_INPUTS, ids=["codec", "must_understand",
                                                                  "endian", "transformer"])
def test_v3_bad_input(tmp_path, roifs_bin, codecs, extra, words):
    path = Path(tmp_path) / "in.zarr"
    write_v3(path, np.zeros((4, 4), "<u2"), (2, 2), [BYTES_LE])
    meta = json.loads((path / "zarr.json").read_text())
    meta.update(codecs=codecs, **extra)
    (path / "zarr.json").write_text(json.dumps(meta))
    config = write_task(tmp_path, (4, 4), [((0, 2), (0, 2))], "copy", {}, False)
    for cmd in ("check", "mount"):
        args = [cmd, config] + ([Path(tmp_path) / "mnt"] if cmd == "mount" else [])
        (Path(tmp_path) / "mnt").mkdir(exist_ok=True)
        r = run_roifs(roifs_bin, *args)
        assert r.returncode == 2, r.stderr
        assert "zarr.json" in r.stderr and words in r.stderr, r.stderr


@pytest.mark.timeout(120)
def test_v3_corrupt_input_chunk(tmp_path, mount):
    """A crc32c mismatch in an input chunk (or a shard index) fails the output chunks that
    need it with EIO; the others read."""
    data = np.arange(64, dtype="<u2").reshape(8, 8)
    for sharded in (False, True):
        d = Path(tmp_path) / ("sharded" if sharded else "plain")
        codecs = (shard_codec((2, 4), [BYTES_LE]) if sharded else [BYTES_LE, CRC32C])
        write_v3(d / "in.zarr", data, (4, 8) if sharded else (4, 4), codecs)
        victim = d / "in.zarr" / "c" / "0" / "0"
        raw = bytearray(victim.read_bytes())
        raw[-2] ^= 0x01  # inside the checksum (of the chunk, or of the shard index)
        victim.write_bytes(bytes(raw))
        quadrants = [((a, a + 4), (b, b + 4)) for a in (0, 4) for b in (0, 4)]
        config = write_task(d, (8, 8), quadrants, "copy", {"chunks": "4,4", "format": 3},
                            False)
        with mount(config) as m:
            with pytest.raises(OSError) as e:
                (m.path / "c" / "0" / "0").read_bytes()
            assert e.value.errno == errno.EIO
            assert (m.path / "c" / "1" / "1").read_bytes() == data[4:, 4:].tobytes()


@pytest.mark.timeout(180)
def test_v3_cp_cat_ls_export(tmp_path, mount, zarrita, roifs_bin):
    """coreutils and `roifs export` on a sharded, compressed v3 output: the copies read back."""
    task = v2_task(tmp_path, {"chunks": ",".join(map(str, CHUNKS)),
                              "shard": ",".join(map(str, SHARD)), "compressor": "zstd"})
    want = reference(task)
    with mount(task.config) as m:
        ls = subprocess.run(["ls", "-R", str(m.path)], capture_output=True, text=True, timeout=30)
        assert ls.returncode == 0 and "zarr.json" in ls.stdout and "c:" in ls.stdout
        cat = subprocess.run(["cat", str(m.path / "c" / "1" / "0" / "1")], capture_output=True,
                             timeout=30)
        assert cat.returncode == 0
        assert len(cat.stdout) == os.stat(m.path / "c" / "1" / "0" / "1").st_size > 0
        copy = Path(tmp_path) / "copy"
        cp = subprocess.run(["cp", "-r", str(m.path), str(copy)], capture_output=True, text=True,
                            timeout=60)
        assert cp.returncode == 0, cp.stderr
        assert_same(zarrita_read(copy, tmp_path), want, "zarrita.js reading cp -r of the mount")
    dest = Path(tmp_path) / "export"
    r = run_roifs(roifs_bin, "export", task.config, dest, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (dest / "zarr.json").is_file() and not (dest / ".zarray").exists()
    assert_same(zarrita_read(dest, tmp_path), want, "zarrita.js reading roifs export")


def test_sharded_input_keyed_by_content(tmp_path, mount):
    """Issue 31 items 3 and 11 with shards (a shard's part of a key is the hash of its whole
    file, checked against the index and inner chunks a read used): a touch of a shard and a
    shard rewritten with the same bytes compute nothing after a remount; a shard rewritten in
    place with other bytes of the same size, its mtime put back, computes exactly the ROIs
    that read it, and the values follow."""
    data = np.arange(16 * 16, dtype="<i4").reshape(16, 16)
    path = tmp_path / "in.zarr"
    write_v3(path, data, (8, 8), shard_codec((4, 4), [BYTES_LE]))
    rois = [((0, 6), (0, 6)), ((2, 12), (2, 12)), ((10, 16), (10, 16)), ((9, 15), (0, 5))]
    config = write_task(tmp_path, data.shape, rois, "add", {"format": 2, "chunks": "8,8"}, False)

    def want(d):
        out = np.zeros_like(d)
        for r in rois:
            out[roi_slices(r)] = d[roi_slices(r)] + 3
        return out

    def remount(d, calls):
        with mount(config) as m:
            np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want(d))
            assert m.status()["calls"] == calls

    remount(data, len(rois))
    shard = path / "c" / "1" / "1"
    os.utime(shard)  # touch
    remount(data, 0)
    raw = shard.read_bytes()
    (tmp_path / "new").write_bytes(raw)  # the same bytes: a new file renamed over it
    os.rename(tmp_path / "new", shard)
    with open(path / "c" / "0" / "0", "r+b") as f:  # and in place
        f.write((path / "c" / "0" / "0").read_bytes())
    remount(data, 0)
    write_v3(tmp_path / "other.zarr", data + 100, (8, 8), shard_codec((4, 4), [BYTES_LE]))
    st = shard.stat()
    with open(shard, "r+b") as f:
        f.write((tmp_path / "other.zarr" / "c" / "1" / "1").read_bytes())
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert shard.stat().st_mtime_ns == st.st_mtime_ns and shard.stat().st_size == st.st_size
    data2 = data.copy()
    data2[8:16, 8:16] += 100
    remount(data2, 2)  # ROIs 1 and 2 read shard 1/1
