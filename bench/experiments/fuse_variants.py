"""EXPERIMENT (not run by bench/run.sh): FUSE reply variants for warm reads, side by side.

Needs a roifs built from the variant fs.c that lived at bench/experiments/fs_variants.c.txt
(removed from the tree as a stale copy of fs.c; `git show 9abdc6c:bench/experiments/fs_variants.c.txt`
gives it, with its header saying how to build) in $ROIFS_EXP_BIN.  Builds a 256 MiB array (as bench/warm.py), computes it, copies it to a plain
folder, then for each repeat reads the plain folder and, for every variant, a freshly mounted
copy twice (fresh: through the daemon; repeat: from the FUSE page cache); prints medians.

usage: fuse_variants.py [none|blosc-lz4] [raw|zarr|cat] [REPS]
Variants: edit VARIANTS below ((label, environment, bdi read_ahead_kb or None)).
"""
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common as C  # noqa: E402
import warm  # noqa: E402

VARIANTS = [
    ("pread+reply_buf ra128", {}, 128),
    ("pread+reply_buf ra1024", {}, 1024),
    ("per-thread buffer ra128", {"ROIFS_EXP_REPLY": "tls"}, 128),
    ("reply_data fd ra128", {"ROIFS_EXP_REPLY": "fd"}, 128),
    ("splice ra128", {"ROIFS_EXP_REPLY": "splice"}, 128),
    ("splice ra1024", {"ROIFS_EXP_REPLY": "splice"}, 1024),
    ("direct_io", {"ROIFS_EXP_DIO": "1"}, None),
    ("push at open ra128", {"ROIFS_EXP_PUSH": str(64 << 20)}, 128),
    ("max_write 128K ra1024", {"ROIFS_EXP_MAXWRITE": str(128 << 10)}, 1024),
]


def main():
    enc = sys.argv[1] if len(sys.argv) > 1 else "none"
    mode = sys.argv[2] if len(sys.argv) > 2 else "raw"
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    C.ROIFS = os.environ["ROIFS_EXP_BIN"]
    read = {"raw": warm.read_raw, "zarr": warm.read_zarr, "cat": warm.read_cat}[mode]
    with C.scratch("fuse_variants") as d:
        warm.make_input(d / "in.zarr")
        cfg = C.write_config(d / "t.ini", {
            "input": {"path": d / "in.zarr"}, "rois": {"grid": "1,1024,1024"},
            "process": {"builtin": "copy"}, "output": warm.ENCODINGS[enc],
            "cache": {"dir": d / "cache"}})
        subprocess.run([C.ROIFS, "warm", str(cfg)], check=True, capture_output=True)
        plain = d / "plain"
        with C.Mount(cfg, d / "mnt") as m:
            subprocess.run(["cp", "-r", str(m.mnt), str(plain)], check=True)
        res = {"plain": []}
        for i in range(reps):
            read(plain)
            res["plain"].append(C.timed(lambda: read(plain)))
            for label, env, ra in VARIANTS:
                saved = dict(os.environ)
                os.environ.update(env)
                try:
                    with C.Mount(cfg, d / "mnt") as m:
                        if ra:
                            (C.bdi_of(m.mnt) / "read_ahead_kb").write_text(str(ra))
                        c0 = m.cpu_s()
                        fresh = C.timed(lambda: read(m.mnt))
                        cpu = m.cpu_s() - c0
                        repeat = C.timed(lambda: read(m.mnt))
                finally:
                    os.environ.clear()
                    os.environ.update(saved)
                res.setdefault(label, []).append((fresh, repeat, cpu))
    p = statistics.median(res["plain"])
    print(f"{enc}, {mode}: plain folder {p:.3f} s (median of {reps})")
    for label, _, _ in VARIANTS:
        f, r, c = (statistics.median(x[j] for x in res[label]) for j in range(3))
        print(f"  {label:26s} fresh {f:.3f} s ({p / f:.2f}x)  repeat {r:.3f} s ({p / r:.2f}x)"
              f"  daemon CPU {c:.2f} s")


if __name__ == "__main__":
    main()
