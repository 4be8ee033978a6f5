"""The cost of keeping every ROI result (cache layout 2, issue 19): the small-ROI benchmark
(4,096 ROIs of 64x64, bench/small_rois.py's task) and the 100,000-ROI scaling run
(bench/scaling.py's largest task), each a cold mount + full zarr-python read, with this roifs
and with the roifs of commit 8e647d5 (before the cache rework: results were not kept, the
cache held the chunk files only), side by side; and the cache's size with every result kept
against the output's size.

The baseline binary: $ROIFS_BASELINE_BIN, else commit 8e647d5 is built in a temporary git
worktree (removed afterwards). Target: within 10 % of the baseline (mount + read)."""
import contextlib
import os
import time
from pathlib import Path

import numpy as np
import zarr

import common as C

REPS = int(os.environ.get("REPS", 5))
BASELINE_COMMIT = "8e647d5"


@contextlib.contextmanager
def baseline_binary(info):
    """The roifs of BASELINE_COMMIT ($ROIFS_BASELINE_BIN if set), named in info["baseline"]."""
    with C.binary_at(BASELINE_COMMIT, "ROIFS_BASELINE_BIN") as b:
        info["baseline"] = f"{BASELINE_COMMIT} ({C._cmd([b, '--version'])})"
        yield b


def du(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def small_task(d):
    n, ch, t = 4096, 1024, 64
    inp = d / "small_in.zarr"
    data = C.random_input(inp, (n, n), (ch, ch), 0)
    rois = C.tiles((n, n), t)
    C.write_rois(d / "small_rois.txt", rois)
    cfg = C.write_config(d / "small.ini", {
        "input": {"path": inp}, "rois": {"file": d / "small_rois.txt"},
        "process": {"builtin": "add", "param.value": 1},
        "output": {"compressor": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "shuffle"},
        "cache": {"dir": d / "small_cache"}})
    return cfg, d / "small_cache", data + 1, len(rois)


def scaling_task(d):
    t, ch, (ty, tx) = 32, 256, (250, 400)
    shape = (ty * t, tx * t)
    inp = d / "big_in.zarr"
    data = C.random_input(inp, shape, (ch, ch), 100000)
    rois = C.tiles(shape, t)
    C.write_rois(d / "big_rois.txt", rois)
    cfg = C.write_config(d / "big.ini", {
        "input": {"path": inp}, "rois": {"file": d / "big_rois.txt"},
        "process": {"builtin": "add", "param.value": 1},
        "cache": {"dir": d / "big_cache"}})
    return cfg, d / "big_cache", data + 1, len(rois)


def runner(binary, cfg, cache, mnt, expected, n, sizes):
    def run():
        C.rmtree(cache)
        os.sync()  # the previous run's writes (and removals) are not this one's to wait for
        with C.Mount(cfg, mnt, binary=binary) as m:
            c0 = m.cpu_s()
            t0 = time.perf_counter()
            got = zarr.open(str(m.mnt), mode="r")[:]
            t = time.perf_counter() - t0
            cpu = m.cpu_s() - c0
            calls = m.status()["calls"]
        assert calls == n and np.array_equal(got, expected)
        results, chunks = du(cache / "results"), du(cache / "chunks")
        sizes.append({"results": results, "chunks": chunks, "files": sum(
            1 for p in (cache / "results").rglob("*") if p.is_file()) if (cache / "results").exists()
            else 0})
        return {"read_s": t, "mount_s": m.mount_s, "total_s": t + m.mount_s, "cpu_s": cpu}
    return run


def main():
    info = C.machine()
    with baseline_binary(info) as baseline, C.scratch("cache_cost") as d:
        small, big = small_task(d), scaling_task(d)
        sizes = {k: [] for k in ("small new", "small old", "big new", "big old")}
        cases = {}
        for name, (cfg, cache, exp, n) in (("small", small), ("big", big)):
            for who, b in (("new", C.ROIFS), ("old", baseline)):
                cases[f"{name} | {who}"] = runner(b, cfg, cache, d / "mnt", exp, n,
                                                  sizes[f"{name} {who}"])
        res = C.interleaved(REPS, cases)

    rows, summary, raw = [], [], {"runs": res, "sizes": sizes}
    output_bytes = {"small": 4096 * 4096 * 2, "big": 8000 * 12800 * 2}
    titles = {"small": "4,096 ROIs of 64×64 (small_rois)",
              "big": "100,000 ROIs of 32×32 (scaling)"}
    for name in ("small", "big"):
        new, old = res[f"{name} | new"], res[f"{name} | old"]
        tn, to = C.median([x["total_s"] for x in new]), C.median([x["total_s"] for x in old])
        rn, ro = C.median([x["read_s"] for x in new]), C.median([x["read_s"] for x in old])
        cn, co = C.median([x["cpu_s"] for x in new]), C.median([x["cpu_s"] for x in old])
        s = sizes[f"{name} new"][-1]
        so = sizes[f"{name} old"][-1]
        rows.append([titles[name], f"{to:.3f}", f"{tn:.3f}", f"{tn / to:.2f}",
                     f"{ro:.3f} / {rn:.3f}", f"{co:.2f} / {cn:.2f}",
                     f"{s['results'] / 2**20:.1f} MiB in {s['files']} files",
                     f"{s['chunks'] / 2**20:.1f} MiB ({so['chunks'] / 2**20:.1f})",
                     f"{s['results'] / s['chunks']:.2f} ({s['results'] / output_bytes[name]:.2f})"])
        summary.append({"scenario": f"cost of keeping every result: {titles[name]}",
                        "roifs": f"{tn:.3f} s mount + read", "alternative":
                        f"roifs {BASELINE_COMMIT} {to:.3f} s", "ratio": f"{tn / to:.2f}",
                        "target": "≤ 1.10", "met": tn / to <= 1.10})
    md = (f"{REPS} repeats, interleaved (each a fresh cache: mount, then `zarr.open(MNT)[:]`); "
          f"medians. Old: roifs of commit {BASELINE_COMMIT}, before the cache rework (no ROI "
          "result kept; the cache held the chunk files). New: this roifs, which stores every ROI "
          "result (blosc lz4 when it saves a quarter, in packs) besides the chunk files.\n\n" +
          C.md_table(["task", "old mount+read (s)", "new mount+read (s)", "new / old",
                      "read old / new (s)", "daemon CPU old / new (s)", "results kept",
                      "chunk files (old)", "results / chunk files (/ raw output)"], rows))
    C.save("cache_cost", "Cost of keeping every ROI result", summary, md, raw, info)


if __name__ == "__main__":
    main()
