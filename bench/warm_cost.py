"""The cost of verifying the cache on warm reads (issue 13): an array computed by `roifs warm`,
then a full read right after a mount (fresh) and the same mount read again (repeat), with this
roifs and with the roifs of commit 8e647d5 (before cache entries were checked), side by side,
each on its own cache made by its own `warm`. Readers: raw Python reads (open, read() whole,
close, every chunk file) and zarr-python `z[:]`. The array is bench/warm.py's "2 MiB chunks"
one (8x4096x4096 uint16, chunks 1x1024x1024, 128 files), uncompressed and blosc lz4.

The baseline binary: $ROIFS_BASELINE_BIN, else commit 8e647d5 is built in a temporary git
worktree (removed afterwards). Target: within 10 % of the baseline (medians)."""
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import zarr
from numcodecs import Blosc

import common as C
from cache_cost import BASELINE_COMMIT, build_baseline

REPS = int(os.environ.get("REPS", 7))
SHAPE, CHUNKS = (8, 4096, 4096), (1, 1024, 1024)
ENCODINGS = {"none": {"compressor": "none"},
             "blosc-lz4": {"compressor": "blosc", "cname": "lz4", "clevel": 5,
                           "shuffle": "shuffle"}}


def make_input(d):
    rng = np.random.default_rng(13)
    y = np.linspace(0, 1, SHAPE[1], dtype=np.float32)[:, None]
    x = np.linspace(0, 1, SHAPE[2], dtype=np.float32)[None, :]
    inp = d / "in.zarr"
    z = zarr.open(str(inp), mode="w", shape=SHAPE, chunks=CHUNKS, dtype="<u2",
                  compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE))
    for k in range(SHAPE[0]):
        z[k] = (1000 * (y + x + k) + rng.integers(0, 64, SHAPE[1:])).astype("<u2")
    return inp


def read_raw(mnt):
    n = 0
    for p in sorted(Path(mnt).iterdir()):
        if not p.name.startswith("."):
            with open(p, "rb") as f:
                n += len(f.read())
    return n


def read_zarr(mnt):
    return zarr.open(str(mnt), mode="r")[:]


def case(binary, cfg, mnt, reader, want):
    def run():
        os.sync()
        with C.Mount(cfg, mnt, binary=binary) as m:
            out = {}
            for state in ("fresh", "repeat"):
                c0, t0 = m.cpu_s(), time.perf_counter()
                got = reader(m.mnt)
                out[f"{state}_s"] = time.perf_counter() - t0
                out[f"{state}_cpu_s"] = m.cpu_s() - c0
                ok = got == want if isinstance(want, int) else np.array_equal(got, want)
                assert ok, f"wrong data read ({reader.__name__}, {state})"
            assert m.status()["calls"] == 0
        return out
    return run


def main():
    info = C.machine()
    baseline, cleanup = build_baseline()
    try:
        info["baseline"] = f"{BASELINE_COMMIT} ({C._cmd([baseline, '--version'])})"
        with C.scratch("warm_cost") as d:
            inp = make_input(d)
            expected = zarr.open(str(inp), mode="r")[:]
            cases = {}
            for enc, out in ENCODINGS.items():
                for who, b in (("new", C.ROIFS), ("old", baseline)):
                    cfg = C.write_config(d / f"{enc}-{who}.ini", {
                        "input": {"path": inp}, "rois": {"grid": "1,1024,1024"},
                        "process": {"builtin": "copy"}, "output": out,
                        "cache": {"dir": d / f"cache-{enc}-{who}"}})
                    subprocess.run([b, "warm", str(cfg)], check=True, capture_output=True)
                    for rname, reader, want in (("raw read()", read_raw, expected.nbytes if
                                                 enc == "none" else None),
                                                ("zarr-python", read_zarr, expected)):
                        if want is None:  # compressed files: their total size, read once
                            with C.Mount(cfg, d / "mnt", binary=b) as m:
                                want = read_raw(m.mnt)
                        cases[f"{enc} {rname} | {who}"] = case(b, cfg, d / "mnt", reader, want)
            res = C.interleaved(REPS, cases)
    finally:
        cleanup()

    rows, summary = [], []
    for enc in ENCODINGS:
        for rname in ("raw read()", "zarr-python"):
            new, old = res[f"{enc} {rname} | new"], res[f"{enc} {rname} | old"]
            row = [enc, rname]
            for state in ("fresh", "repeat"):
                tn = C.median([x[f"{state}_s"] for x in new])
                to = C.median([x[f"{state}_s"] for x in old])
                cn = C.median([x[f"{state}_cpu_s"] for x in new])
                co = C.median([x[f"{state}_cpu_s"] for x in old])
                row += [f"{to * 1000:.1f}", f"{tn * 1000:.1f}", f"{tn / to:.2f}",
                        f"{co:.2f} / {cn:.2f}"]
                summary.append({"scenario": f"warm read, {state}, {enc}, {rname}: "
                                "verified cache vs before",
                                "roifs": f"{tn * 1000:.1f} ms",
                                "alternative": f"roifs {BASELINE_COMMIT} {to * 1000:.1f} ms",
                                "ratio": f"{tn / to:.2f}", "target": "≤ 1.10",
                                "met": tn / to <= 1.10})
            rows.append(row)
    md = (f"{REPS} repeats, interleaved; medians. Each repeat mounts, reads every chunk (fresh: "
          "the first read of this mount), reads again (repeat), unmounts. Old: roifs of commit "
          f"{BASELINE_COMMIT}, before cache entries carried a checksum. New: this roifs (chunk "
          "files stamped when written, checked in full only when not as written).\n\n" +
          C.md_table(["encoding", "reader", "fresh old (ms)", "fresh new (ms)", "new / old",
                      "daemon CPU old / new (s)", "repeat old (ms)", "repeat new (ms)",
                      "new / old", "daemon CPU old / new (s)"], rows))
    C.save("warm_cost", "Cost of verifying the cache on warm reads", summary, md,
           {"runs": res}, info)


if __name__ == "__main__":
    main()
