"""Warm reads: a full read of an already computed array through the mount vs the same chunk
files in a plain folder, with the same reader.

Array: 8x4096x4096 uint16 (256 MiB decoded), chunks 1x1024x1024 (2 MiB), a smooth image with
noise, computed by builtin copy (`roifs warm`), for two encodings: none and blosc lz4.  The
plain folder is `cp -r` of the mount (byte-identical chunk files, in the page cache).

Readers: zarr-python `z[:]`; raw Python reads (open, read() whole, close, every file);
`cat` of every chunk file to /dev/null.  Mount states:
- fresh: remounted just before the read (the FUSE page cache is empty; every byte goes through
  the daemon, which reads the cache files from the host page cache);
- repeat: the same mount read a second time (served from the FUSE inodes' page cache,
  keep_cache).
The mount's bdi read_ahead_kb is what roifs leaves (the kernel's 128); the benchmark also forces
1024 on a fresh mount (/sys/class/bdi/0:N/read_ahead_kb) to show what raising it is worth.  Target: >= 0.8x of the
plain folder."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import zarr
from numcodecs import Blosc

import common as C

REPS = int(os.environ.get("REPS", 5))
SHAPE, CHUNKS = (8, 4096, 4096), (1, 1024, 1024)
ENCODINGS = {"none": {"compressor": "none"},
             "blosc-lz4": {"compressor": "blosc", "cname": "lz4", "clevel": 5,
                           "shuffle": "shuffle"}}


def chunk_files(root):
    return sorted(str(p) for p in Path(root).iterdir() if not p.name.startswith("."))


def read_zarr(root):
    zarr.open(str(root), mode="r")[:]


def read_raw(root):
    n = 0
    for p in chunk_files(root):
        with open(p, "rb") as f:
            n += len(f.read())
    return n


def read_cat(root):
    subprocess.run(["cat"] + chunk_files(root), stdout=subprocess.DEVNULL, check=True)


def read_zarr_serial(root):
    """zarr-python with numcodecs' blosc threads off (blosc decodes in the calling thread)."""
    import numcodecs.blosc as nb
    old = nb.use_threads
    nb.use_threads = False
    try:
        read_zarr(root)
    finally:
        nb.use_threads = old


READERS = {"zarr-python z[:]": read_zarr, "zarr-python, blosc threads off": read_zarr_serial,
           "raw Python read()": read_raw, "cat": read_cat}


def readers(enc):
    return {k: v for k, v in READERS.items() if enc != "none" or "blosc" not in k}


def make_input(path):
    z = zarr.open(str(path), mode="w", shape=SHAPE, chunks=CHUNKS, dtype="<u2",
                  compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE))
    yy, xx = np.mgrid[0:SHAPE[1], 0:SHAPE[2]].astype(np.float32)
    rng = np.random.default_rng(0)
    for i in range(SHAPE[0]):
        img = 2000 + 1000 * np.sin(yy / (50.0 + i)) * np.cos(xx / 70.0)
        z[i] = (img + rng.normal(0, 30, img.shape)).astype("<u2")


def set_ra(mnt, kb):
    (C.bdi_of(mnt) / "read_ahead_kb").write_text(str(kb))


def get_ra(mnt):
    return int((C.bdi_of(mnt) / "read_ahead_kb").read_text())


def main():
    info = C.machine()
    res, ra_seen, sizes = {}, {}, {}
    with C.scratch("warm") as d:
        make_input(d / "in.zarr")
        cases = {}
        for enc, out in ENCODINGS.items():
            cfg = C.write_config(d / f"{enc}.ini", {
                "input": {"path": d / "in.zarr"},
                "rois": {"grid": ",".join(map(str, CHUNKS))},
                "process": {"builtin": "copy"},
                "output": out,
                "cache": {"dir": d / f"cache-{enc}"}})
            subprocess.run([C.ROIFS, "warm", str(cfg)], check=True, capture_output=True)
            plain = d / f"plain-{enc}.zarr"
            mnt = d / f"mnt-{enc}"
            with C.Mount(cfg, mnt) as m:
                subprocess.run(["cp", "-r", str(m.mnt), str(plain)], check=True)
                ra_seen[enc] = get_ra(m.mnt)
            C.rmtree(plain / ".roifs")
            sizes[enc] = sum(os.path.getsize(p) for p in chunk_files(plain))
            ref = zarr.open(str(plain), mode="r")[:]
            assert np.array_equal(ref, zarr.open(str(d / "in.zarr"), mode="r")[:])
            del ref
            for rname, fn in readers(enc).items():
                def plain_case(fn=fn, plain=plain):
                    fn(plain)  # make sure it is in the page cache
                    return C.timed(lambda: fn(plain))

                def mount_case(fn=fn, cfg=cfg, mnt=mnt, ra=None):
                    with C.Mount(cfg, mnt) as m:
                        if ra is not None:
                            set_ra(m.mnt, ra)
                        fresh = C.timed(lambda: fn(m.mnt))
                        repeat = C.timed(lambda: fn(m.mnt))
                        assert m.status()["calls"] == 0
                    return {"fresh": fresh, "repeat": repeat}

                cases[(enc, rname, "plain")] = plain_case
                cases[(enc, rname, "mount")] = mount_case
                cases[(enc, rname, "mount ra=1024")] = \
                    lambda fn=fn, cfg=cfg, mnt=mnt: mount_case(fn, cfg, mnt, 1024)
        keyed = {" | ".join(k): v for k, v in cases.items()}
        out = C.interleaved(REPS, keyed)
        res = {tuple(k.split(" | ")): v for k, v in out.items()}

    raw = {}
    for enc in ENCODINGS:
        for rname in readers(enc):
            raw[f"{enc} | {rname}"] = {
                "plain_s": res[(enc, rname, "plain")],
                "mount_fresh_s": [x["fresh"] for x in res[(enc, rname, "mount")]],
                "mount_repeat_s": [x["repeat"] for x in res[(enc, rname, "mount")]],
                "mount_fresh_ra1024_s": [x["fresh"] for x in res[(enc, rname, "mount ra=1024")]]}
    report(raw, info | {"read_ahead_kb_by_roifs": ra_seen, "chunk_file_bytes": sizes}, REPS)


def report(raw, info, reps):
    """Tables, summary and plot from the measurements (also: warm.py --replot)."""
    sizes, ra_seen = info["chunk_file_bytes"], info["read_ahead_kb_by_roifs"]
    rows, summary, plot = [], [], {}
    for key, r in raw.items():
        enc, rname = key.split(" | ")
        mp, mmf, mmr, mra = (C.median(r[k]) for k in (
            "plain_s", "mount_fresh_s", "mount_repeat_s", "mount_fresh_ra1024_s"))
        plot[(enc, rname)] = (mp / mmf, mp / mmr, mp / mra)
        rows.append([enc, rname, f"{mp:.3f}", f"{mmf:.3f}", f"**{mp / mmf:.2f}×**",
                     f"{mmr:.3f}", f"{mp / mmr:.2f}×", f"{mra:.3f}", f"{mp / mra:.2f}×"])
        summary.append({"scenario": f"warm read, {enc}, {rname}",
                        "roifs": f"{mmf:.3f} s fresh / {mmr:.3f} s repeat",
                        "alternative": f"plain {mp:.3f} s",
                        "ratio": f"{mp / mmf:.2f}× / {mp / mmr:.2f}×",
                        "target": "≥ 0.8×", "met": mp / mmf >= 0.8})
    mib = SHAPE[0] * SHAPE[1] * SHAPE[2] * 2 / 2**20
    md = (f"{reps} repeats, interleaved; medians, seconds per full read ({mib:.0f} MiB "
          f"decoded; chunk files: none {sizes['none'] / 2**20:.0f} MiB, blosc-lz4 "
          f"{sizes['blosc-lz4'] / 2**20:.0f} MiB, 128 files). Ratio = plain time / mount "
          f"time (1.0 = as fast as the plain folder, whose files are in the page cache). "
          f"bdi read_ahead_kb left by roifs: "
          f"{', '.join(f'{k}: {v}' for k, v in ra_seen.items())}. (Idle CPU of the mount "
          f"cases includes mounting and unmounting.)\n\n" +
          C.md_table(["encoding", "reader", "plain folder", "mount, fresh", "fresh ratio",
                      "mount, repeat", "repeat ratio", "fresh, ra=1024", "ra=1024 ratio"], rows))

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    keys = list(plot)
    x = np.arange(len(keys))
    labels = ["mount, fresh (through the daemon)", "mount, repeat (FUSE page cache)",
              "mount, fresh, read_ahead_kb=1024"]
    for j, lab in enumerate(labels):
        ax.bar(x + (j - 1) * 0.27, [plot[k][j] for k in keys], 0.27, label=lab)
    ax.axhline(0.8, color="k", ls="--", lw=0.8, label="target 0.8")
    ax.axhline(1.0, color="grey", ls=":", lw=0.8)
    short = {"zarr-python z[:]": "zarr", "zarr-python, blosc threads off": "zarr\n1 blosc thread",
             "raw Python read()": "raw read()", "cat": "cat"}
    ax.set_xticks(x, [f"{e}\n{short.get(r, r)}" for e, r in keys], fontsize=7)
    ax.set_ylabel("plain-folder time / mount time (median)")
    ax.set_title("Warm full read of 256 MiB: mount vs the same files in a plain folder")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(C.RESULTS / "warm.png", dpi=90)
    C.save("warm", "4. Warm reads", summary, md, raw, info)


if __name__ == "__main__":
    if sys.argv[1:] == ["--replot"]:
        doc = json.loads((C.RESULTS / "warm.json").read_text())
        C.IDLE.update(doc.get("idle_cores", {}))
        doc["machine"].setdefault("chunk_file_bytes", {"none": 256 << 20, "blosc-lz4": 0})
        report(doc["raw"], doc["machine"], len(next(iter(doc["raw"].values()))["plain_s"]))
    else:
        main()
