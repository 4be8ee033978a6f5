#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses into tests/fuzz-corpus/<name>/: small valid
inputs made with zarr-python and numcodecs (run once; the files are kept in the repository,
next to any crashing inputs found later, which must not be removed). Zarr v3 storage units
(decode_v3) come from roifs' own encoder, as no v3 writer is installed:
    ROIFS_FUZZ_SEEDS=tests/fuzz-corpus/decode_v3 build-fuzz/fuzz/fuzz_decode_v3 -runs=0"""
import hashlib
import itertools
import json
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import zarr
from numcodecs import GZip, Zlib, Zstd
from numcodecs.blosc import BITSHUFFLE, NOSHUFFLE, SHUFFLE, Blosc

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fuzz-corpus"


def put(name, data):
    if isinstance(data, str):
        data = data.encode()
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    (d / ("seed-" + hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)


def zarrays():
    cases = [
        dict(shape=(100, 200), chunks=(10, 20), dtype="<u2", compressor=Blosc("lz4", 5, SHUFFLE)),
        dict(shape=(7,), chunks=(3,), dtype="|u1", compressor=None, fill_value=255),
        dict(shape=(4, 5, 6), chunks=(2, 2, 2), dtype=">i4", compressor=Zlib(3), order="F"),
        dict(shape=(9, 9), chunks=(4, 4), dtype="<f4", compressor=GZip(5), fill_value=np.nan),
        dict(shape=(9, 9), chunks=(4, 4), dtype="<f8", compressor=Zstd(3),
             fill_value=-np.inf, dimension_separator="/"),
        dict(shape=(3, 3), chunks=(3, 3), dtype="<f2", compressor=Blosc("zstd", 9, BITSHUFFLE),
             fill_value=1.5),
        dict(shape=(5,), chunks=(5,), dtype="|b1", compressor=None, fill_value=True),
        dict(shape=(5,), chunks=(2,), dtype="<u8", compressor=None,
             fill_value=np.uint64(2**64 - 1)),
        dict(shape=(5,), chunks=(2,), dtype="<i8", compressor=Blosc("zlib", 1, NOSHUFFLE),
             fill_value=-2**63),
        dict(shape=(2, 3, 4, 5), chunks=(1, 2, 3, 4), dtype="<i2", compressor=None,
             fill_value=None),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for i, kw in enumerate(cases):
            p = Path(tmp) / f"a{i}.zarr"
            zarr.open(str(p), mode="w", **kw)
            yield (p / ".zarray").read_text()


def meta():
    texts = list(zarrays())
    for t in texts:
        put("meta", t)
    m = json.loads(texts[0])
    m["filters"] = []
    put("meta", json.dumps(m))
    m["compressor"] = {"id": "blosc", "cname": "snappy", "clevel": 0, "shuffle": -1,
                       "blocksize": 4096}
    put("meta", json.dumps(m, separators=(",", ":")))


def v3_array(data_type, shape, chunks, codecs, **extra):
    return {"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": codecs, **extra}


def meta_v3():
    le = {"name": "bytes", "configuration": {"endian": "little"}}
    put("meta_v3", json.dumps(v3_array(
        "uint16", [2, 10, 64, 64], [2, 10, 64, 64],
        [le, {"name": "zstd", "configuration": {"level": 0, "checksum": False}}],
        attributes={"a": [1, 2]}, dimension_names=["c", "z", "y", "x"],
        storage_transformers=[])))
    put("meta_v3", json.dumps(v3_array(
        "int8", [10, 9], [4, 6],
        [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2, 3],
            "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}}, "bytes",
                       {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3,
                                                           "shuffle": "bitshuffle",
                                                           "typesize": 1, "blocksize": 0}},
                       "crc32c"],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, "crc32c"],
            "index_location": "start"}}],
        chunk_key_encoding={"name": "v2", "configuration": {"separator": "."}},
        fill_value=-3, my_extension={"must_understand": False, "x": 1})))
    put("meta_v3", json.dumps(v3_array("float32", [5], [2], [le, {"name": "gzip",
                                                                    "configuration": {"level": 5}}],
                                       fill_value="NaN")))
    put("meta_v3", json.dumps(v3_array("bool", [3, 3, 3], [1, 2, 3], ["bytes"], fill_value=True)))
    put("meta_v3", json.dumps(v3_array("uint64", [7], [7], [le, "crc32c"],
                                       fill_value=18446744073709551615)))
    # an AnnData string array as zarr-python 3 writes it (zarr_meta_parse_v3_vlen_utf8)
    put("meta_v3", json.dumps(v3_array(
        "string", [6], [4], [{"name": "vlen-utf8", "configuration": {}},
                             {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
                             "crc32c"], fill_value="",
        attributes={"encoding-type": "string-array", "encoding-version": "0.2.0"})))


def config():
    put("config", (ROOT / "config" / "demo.ini").read_text())
    put("config", "[input]\npath = in.zarr\n[rois]\nfile = rois.txt\n[process]\nbuiltin = copy\n")
    put("config", """\
; every section
[input]
path = in.zarr
level = 0

[rois]
grid = 1,512,512
halo = 0,16,16

[process]
command = /usr/bin/python3 f.py --x=1 ; comment
threads = 4
readahead = -1
timeout = 2.5
retries = 1
param.sigma = 2
param.my-name.x = a b c

[output]
format = 2
dtype = <u4
chunks = 1,256,256
fill_value = nan
outside = fill
compressor = zstd
clevel = 19
cname = zstd
shuffle = bitshuffle
dimension_separator = /

[mount]
log = roifs.log

[cache]
dir = cache
max_size = 10G
""")
    put("config", """\
[input]
path = img.zarr
[rois]
table = img.zarr/tables/FOV_ROI_table
rounding = ngio
[process]
worker = python3 w.py
executor = slurm
[slurm]
partition = gpu
cpus_per_task = 4
mem = 8G
gres = gpu:1
time = 1:00:00
extra = --qos=high
[output]
format = 3
shard = 2,1024,1024
chunks = 1,512,512
ome = yes
levels = 5
downsample = nearest
""")
    long_cmd = "python3 " + " ".join(f"--arg{i}=value{i}" for i in range(40))
    put("config", f"[input]\r\npath = in.zarr\r\n[rois]\r\nfile = r.txt\r\n[process]\r\n"
                  f"command = {long_cmd}\r\n")
    put("config", "\ufeff[input]\n  path = in.zarr\n[rois]\nfile=r.txt\n[process]\nplugin=f.so\n"
                  "[output]\nouside = input\n")


def roi_header(shape):
    return bytes([len(shape) - 1]) + b"".join(struct.pack("<H", s) for s in shape)


def roi():
    put("roi", roi_header((1, 1024, 1024)) + b"# z, y, x\n0:1, 0:512, 0:512\n"
        b"0:1, 480:992, 0:512\n:, 100:200, 300:400\n")
    put("roi", roi_header((10,)) + b"0:10\n\n  # blank and comment\n3:4 # tail\n")
    put("roi", roi_header((30, 40)) + b"0:5, 0:5\r\n2:8,12:18\r\n 12 : 18 ,\t12:18\n:3, 5:\n")
    put("roi", roi_header((100, 100, 100, 100)) +
        b"\n".join(b"%d:%d, :, 0:%d, %d:100" % (i, i + 1, i + 1, 99 - i) for i in range(50)))
    put("roi", roi_header((65535, 65534)) + b"0:18446744073709551615, 0:1\n")
    put("roi", roi_header((6,) * 32) + b", ".join([b"0:6"] * 32) + b"\n")


def namespace():
    # ndim-1, flags (sep "/" | outside=input | nrois << 2), grid - 1 per dim, ROIs, path
    put("namespace", bytes([1, 2 << 2, 2, 3, 0, 1, 0, 1, 2, 2, 1, 1]) + b"1.2")
    put("namespace", bytes([1, 1 | 1 << 2, 2, 3, 0, 3, 0, 4]) + b"0/1")
    put("namespace", bytes([2, 1 | 2, 1, 1, 1]) + b"1/0/1")
    put("namespace", bytes([0, 1 << 2, 9, 3, 2]) + b"4")
    put("namespace", bytes([1, 0, 3, 3]) + b".zarray")
    put("namespace", bytes([1, 0, 3, 3]) + b".roifs/status")


def fixed(enc):
    """The same bytes at every run: a gzip member's header holds the time (bytes 4..7)."""
    enc = bytes(enc)
    return enc[:4] + b"\0\0\0\0" + enc[8:] if enc[:2] == b"\x1f\x8b" else enc


def decode():
    rng = np.random.default_rng(1)
    arrays = [np.arange(1000, dtype="<u2"), np.zeros(64, "|u1"),
              rng.integers(0, 255, 3000).astype("|u1"), rng.normal(size=500).astype("<f8"),
              np.array([], "<i4")]
    codecs = {
        "blosc": [Blosc("lz4", 5, SHUFFLE), Blosc("zstd", 3, BITSHUFFLE),
                  Blosc("blosclz", 0, NOSHUFFLE), Blosc("zlib", 9, SHUFFLE),
                  Blosc("lz4hc", 5, SHUFFLE, blocksize=256)],
        "zlib": [Zlib(1), Zlib(9)],
        "gzip": [GZip(1), GZip(6)],
        "zstd": [Zstd(1), Zstd(19)],
        "none": [None],
    }
    for (name, cs), a in itertools.product(codecs.items(), arrays):
        for c in cs:
            enc = a.tobytes() if c is None else fixed(bytes(c.encode(a)))
            header = struct.pack("<I", a.nbytes)[:3] + bytes([a.itemsize - 1])
            put("decode_" + name, header + enc)
    # two gzip members and two zstd frames, which numcodecs and zarr accept
    a = np.arange(100, dtype="|u1").tobytes()
    put("decode_gzip",
        struct.pack("<I", 200)[:3] + b"\0" + fixed(GZip(1).encode(a)) + fixed(GZip(1).encode(a)))
    put("decode_zstd", struct.pack("<I", 200)[:3] + b"\0" + Zstd(1).encode(a) + Zstd(1).encode(a))


def main():
    for f in (meta, meta_v3, config, roi, namespace, decode):
        f()
    for d in sorted(OUT.iterdir()):
        print(f"{d.name}: {len(list(d.iterdir()))} seeds", file=sys.stderr)


if __name__ == "__main__":
    main()
