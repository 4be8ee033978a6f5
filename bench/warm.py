"""Warm reads: a full read of an already computed array through the mount vs the same chunk
files in a plain folder, with the same reader.

Arrays (uint16, a smooth image with noise, computed by builtin copy with `roifs warm`), each
for two encodings, none and blosc lz4; the plain folder is `cp -r` of the mount
(byte-identical chunk files, in the page cache):
- "2 MiB chunks": 8x4096x4096 (256 MiB decoded), chunks 1x1024x1024, 128 chunk files;
- "FOV chunks": 10x2160x2560 (105 MiB), Fractal-like chunks 1x2160x2560 (10.5 MiB), 10 files.

Readers: zarr-python `z[:]`; raw Python reads (open, read() whole, close, every file);
`cat` of every chunk file to /dev/null.  Mount states:
- fresh: remounted just before the read;
- repeat: the same mount read again (the median of three reads in a row, as for the plain
  folder, which is read once to fill the page cache, then three times).
Mount variants (2 MiB chunks; the FOV array is read as shipped only):
- as shipped: FUSE passthrough (the kernel reads the cache files itself; the daemon answers
  LOOKUP/GETATTR/OPEN/IOCTL/RELEASE only);
- passthrough = false: every READ goes through the daemon (fresh), or is served from the
  FUSE inodes' page cache (repeat, keep_cache);
- polling 1 ms (ROIFS_FUSE_POLL_US=1000): the daemon polls the FUSE device for up to 1 ms
  after each reply while requests come in a burst, instead of blocking at once as shipped
  (src/fs/devio.h; off by default since it measured slower on a quiet machine).
- squashfuse_ll: the FUSE floor of the machine, Debian's squashfuse (a read-only low-level
  FUSE server in C, the structural model of roifs) serving a squashfs image of the plain
  folder's chunk files, stored uncompressed (`mksquashfs -noI -noD -noF -noX`), mounted the
  same way (fresh: just before the read; repeat: the same mount again). It tells what any FUSE
  file system costs here, so roifs's ratios are stated against it as well as the plain folder.
(Raising the bdi read_ahead_kb was measured before and did not help: bench/notes/warm.md.)
For each mount case: the FUSE requests per chunk file opened (the status file's
fuse.requests, by opcode, over the fresh read) and the CPU time of the reader and of the
daemon per read, beside the wall time.
Per-call breakdown: the raw reader's open(), isatty() (Python's open() asks), read() and
close() timed separately and summed over the 128 files, plain folder vs mount (repeat).
Targets: >= 0.8x of the plain folder (0.9x for zarr-python), and roifs as shipped at least
as fast as squashfuse_ll (>= 1.0x of it) for every array, encoding and reader."""
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
ARRAYS = {"2 MiB chunks": ((8, 4096, 4096), (1, 1024, 1024)),
          "FOV chunks": ((10, 2160, 2560), (1, 2160, 2560))}
SMALL = "2 MiB chunks"
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


def per_call(root):
    """Seconds spent in each call of a raw read of every chunk file, summed over the files."""
    t = {"open": 0.0, "isatty": 0.0, "read": 0.0, "close": 0.0}
    for p in chunk_files(root):
        t0 = time.perf_counter()
        fd = os.open(p, os.O_RDONLY)
        t1 = time.perf_counter()
        os.isatty(fd)
        t2 = time.perf_counter()
        os.read(fd, os.fstat(fd).st_size + 1)
        t3 = time.perf_counter()
        os.close(fd)
        t4 = time.perf_counter()
        for k, a, b in (("open", t0, t1), ("isatty", t1, t2), ("read", t2, t3),
                        ("close", t3, t4)):
            t[k] += b - a
    return t


def make_input(path, shape, chunks):
    z = zarr.open(str(path), mode="w", shape=shape, chunks=chunks, dtype="<u2",
                  compressor=Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE))
    yy, xx = np.mgrid[0:shape[1], 0:shape[2]].astype(np.float32)
    rng = np.random.default_rng(0)
    for i in range(shape[0]):
        img = 2000 + 1000 * np.sin(yy / (50.0 + i)) * np.cos(xx / 70.0)
        z[i] = (img + rng.normal(0, 30, img.shape)).astype("<u2")


class SquashMount:
    """squashfuse_ll -f IMAGE MNT in the background, like common.Mount (the benchmark's
    session); .cpu() the daemon's CPU seconds so far."""

    def __init__(self, image, mnt):
        self.image, self.mnt = Path(image), Path(mnt)

    def __enter__(self):
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(["squashfuse_ll", "-f", str(self.image), str(self.mnt)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not C.is_mounted(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"squashfuse_ll failed ({self.proc.returncode})")
            time.sleep(0.001)
        return self

    def cpu(self):
        try:
            f = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc):
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            C.lazy_unmount(self.mnt)
            self.proc.kill()
            self.proc.wait()


def requests(m):
    """The daemon's FUSE request counts by opcode (fuse.requests of the status file)."""
    return m.status()["fuse"]["requests"]


def reader_cpu():
    """CPU seconds of this process (the Python readers) and its waited-for children (cat)."""
    me, ch = C.resource.getrusage(C.resource.RUSAGE_SELF), \
        C.resource.getrusage(C.resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def main():
    info = C.machine()
    sizes = {}
    with C.scratch("warm") as d:
        cases = {}
        for arr, (shape, chunks) in ARRAYS.items():
            a = d / arr.split()[0]
            a.mkdir()
            make_input(a / "in.zarr", shape, chunks)
            for enc, out in ENCODINGS.items():
                add_cases(cases, a, arr, enc, out, sizes)
        keyed = {" | ".join(k): v for k, v in cases.items()}
        out = C.interleaved(REPS, keyed)
        res = {tuple(k.split(" | ")): v for k, v in out.items()}

    raw = {}
    for (arr, enc, rname, var), v in res.items():
        r = raw.setdefault(f"{arr} | {enc} | {rname}", {})
        if var == "plain":
            r["plain_s"] = v
            continue
        key = {"mount": "mount", "mount nopt": "nopt", "mount nopoll": "nopoll",
               "squashfuse": "squash"}[var]
        for state in v[0]:
            if state == "per call":
                r[f"{key}_{state}_s"] = [x[state] for x in v]
                continue
            r[f"{key}_{state}_s"] = [x[state]["s"] for x in v]
            r[f"{key}_{state}_reader_cpu_s"] = [x[state]["reader_cpu"] for x in v]
            r[f"{key}_{state}_daemon_cpu_s"] = [x[state]["daemon_cpu"] for x in v]
            if "requests" in v[0][state]:
                r[f"{key}_{state}_requests"] = [x[state]["requests"] for x in v]
    report(raw, info | {"chunk_file_bytes": sizes}, REPS)


def add_cases(cases, a, arr, enc, out, sizes):
    sections = {"input": {"path": a / "in.zarr"},
                "rois": {"grid": ",".join(map(str, ARRAYS[arr][1]))},
                "process": {"builtin": "copy"},
                "output": out,
                "cache": {"dir": a / f"cache-{enc}"}}
    cfg = C.write_config(a / f"{enc}.ini", sections)
    cfg_nopt = C.write_config(a / f"{enc}-nopt.ini",
                              sections | {"mount": {"passthrough": "false"}})
    subprocess.run([C.ROIFS, "warm", str(cfg)], check=True, capture_output=True)
    plain = a / f"plain-{enc}.zarr"
    mnt = a / f"mnt-{enc}"
    with C.Mount(cfg, mnt) as m:
        subprocess.run(["cp", "-r", str(m.mnt), str(plain)], check=True)
    C.rmtree(plain / ".roifs")
    sizes[f"{arr} | {enc}"] = sum(os.path.getsize(p) for p in chunk_files(plain))
    ref = zarr.open(str(plain), mode="r")[:]
    assert np.array_equal(ref, zarr.open(str(a / "in.zarr"), mode="r")[:])
    del ref

    nfiles = len(chunk_files(plain))
    image = a / f"plain-{enc}.sqfs"
    subprocess.run(["mksquashfs", str(plain), str(image), "-noappend", "-noI", "-noD", "-noF",
                    "-noX", "-no-xattrs", "-quiet", "-no-progress"], check=True,
                   stdout=subprocess.DEVNULL)
    smnt = a / f"sq-{enc}"

    def squash_case(fn):
        with SquashMount(image, smnt) as m:
            got = {}
            for state in ("fresh", "repeat"):
                n = 1 if state == "fresh" else 3
                c0, d0 = reader_cpu(), m.cpu()
                ts = [C.timed(lambda: fn(m.mnt)) for _ in range(n)]
                got[state] = {"s": C.median(ts), "reader_cpu": (reader_cpu() - c0) / n,
                              "daemon_cpu": (m.cpu() - d0) / n}
        return got

    def mount_case(fn, cfg=cfg, pt=True, env=None, states=("fresh", "repeat")):
        with C.Mount(cfg, mnt, env=env) as m:
            got = {}
            for state in states:
                if state == "per call":
                    got[state] = per_call(m.mnt)
                    continue
                n = 1 if state == "fresh" else 3
                q0, c0, d0 = requests(m), reader_cpu(), m.cpu()["daemon"]
                ts = [C.timed(lambda: fn(m.mnt)) for _ in range(n)]
                c1, d1, q1 = reader_cpu(), m.cpu()["daemon"], requests(m)
                got[state] = {"s": C.median(ts), "reader_cpu": (c1 - c0) / n,
                              "daemon_cpu": (d1 - d0) / n,
                              "requests": {k: (q1.get(k, 0) - q0.get(k, 0)) / n / nfiles
                                           for k in q1 if q1.get(k, 0) != q0.get(k, 0)}}
            st = m.status()
            assert st["calls"] == 0
            assert st["fuse"]["passthrough"] == pt, st["fuse"]
        return got

    rs = readers(enc) if arr == SMALL else \
        {k: READERS[k] for k in ("zarr-python z[:]", "raw Python read()")}
    for rname, fn in rs.items():
        def plain_case(fn=fn):
            fn(plain)  # make sure it is in the page cache
            return C.median([C.timed(lambda: fn(plain)) for _ in range(3)])

        cases[(arr, enc, rname, "plain")] = plain_case
        cases[(arr, enc, rname, "mount")] = lambda fn=fn: mount_case(fn)
        cases[(arr, enc, rname, "squashfuse")] = lambda fn=fn: squash_case(fn)
        cases[(arr, enc, rname, "mount nopoll")] = \
            lambda fn=fn: mount_case(fn, env={"ROIFS_FUSE_POLL_US": "1000"})
        if arr == SMALL:
            cases[(arr, enc, rname, "mount nopt")] = \
                lambda fn=fn: mount_case(fn, cfg_nopt, pt=False)
    if arr == SMALL and enc == "none":
        def plain_calls():
            per_call(plain)
            return per_call(plain)

        cases[(arr, enc, "per call", "plain")] = plain_calls
        cases[(arr, enc, "per call", "mount")] = \
            lambda: mount_case(read_raw, states=("fresh", "per call"))


COLS = [("mount", "fresh"), ("mount", "repeat"), ("squash", "fresh"), ("squash", "repeat"),
        ("nopoll", "fresh"), ("nopoll", "repeat"), ("nopt", "fresh"), ("nopt", "repeat")]
LABELS = {"mount": "as shipped", "squash": "squashfuse_ll", "nopoll": "polling 1 ms",
          "nopt": "no pt"}


def per_file(reqs):
    """'OPEN 1, IOCTL 1, RELEASE 1 (3.0)': requests per chunk file opened, medians."""
    if not reqs:
        return "?"
    keys = sorted({k for q in reqs for k in q})
    med = {k: C.median([q.get(k, 0) for q in reqs]) for k in keys}
    med = {k: v for k, v in med.items() if v >= 0.005}
    return ", ".join(f"{k} {v:.2g}" for k, v in med.items()) + f" (**{sum(med.values()):.2f}**)"


def report(raw, info, reps):
    """Tables, summary and plot from the measurements (also: warm.py --replot)."""
    sizes = info["chunk_file_bytes"]
    tables = {arr: [] for arr in ARRAYS}
    cpu_rows, req_rows = [], []
    summary, plot, calls = [], {}, None
    for key, r in raw.items():
        arr, enc, rname = key.split(" | ")
        if rname == "per call":
            calls = r
            continue
        mp = C.median(r["plain_s"])
        med = {c: C.median(r[f"{c[0]}_{c[1]}_s"]) for c in COLS if f"{c[0]}_{c[1]}_s" in r}
        plot[(arr, enc, rname)] = [mp / med[c] if c in med else 0 for c in COLS]
        row = [enc, rname, f"{mp:.3f}"]
        for c in COLS:
            if c not in med:
                continue
            ratio = f"{mp / med[c]:.2f}×"
            row += [f"{med[c]:.3f}", f"**{ratio}**" if c[0] == "mount" else ratio]
        tables[arr].append(row)
        for c in COLS:
            if f"{c[0]}_{c[1]}_reader_cpu_s" not in r:
                continue
            rc = C.median(r[f"{c[0]}_{c[1]}_reader_cpu_s"])
            dc = C.median(r[f"{c[0]}_{c[1]}_daemon_cpu_s"])
            cpu_rows.append([arr, enc, rname, f"{LABELS[c[0]]}, {c[1]}", f"{med[c]:.3f}",
                             f"{rc:.3f}", f"{dc:.3f}"])
            if c[1] == "fresh" or c[0] == "mount":
                req_rows.append([arr, enc, rname, f"{LABELS[c[0]]}, {c[1]}",
                                 per_file(r.get(f"{c[0]}_{c[1]}_requests"))])
        mf, mr = med[("mount", "fresh")], med[("mount", "repeat")]
        target = 0.9 if rname.startswith("zarr") else 0.8
        summary.append({"scenario": f"warm read, {arr}, {enc}, {rname}",
                        "roifs": f"{mf:.3f} s fresh / {mr:.3f} s repeat",
                        "alternative": f"plain {mp:.3f} s",
                        "ratio": f"{mp / mf:.2f}× / {mp / mr:.2f}×",
                        "target": f"≥ {target}×", "met": min(mp / mf, mp / mr) >= target})
        if ("squash", "fresh") in med:
            sf, sr = med[("squash", "fresh")], med[("squash", "repeat")]
            summary.append({"scenario": f"warm read against the FUSE floor, {arr}, {enc}, {rname}",
                            "roifs": f"{mf:.3f} s fresh / {mr:.3f} s repeat",
                            "alternative": f"squashfuse_ll {sf:.3f} s / {sr:.3f} s",
                            "ratio": f"{sf / mf:.2f}× / {sr / mr:.2f}×",
                            "target": "≥ 1.0×", "met": min(sf / mf, sr / mr) >= 1.0})
    md = (f"{reps} repeats, interleaved; medians, seconds per full read. Ratio = plain time / "
          f"mount time (1.0 = as fast as the plain folder, whose files are in the page cache). "
          f"\"as shipped\" = FUSE passthrough (the status file said `fuse.passthrough: true` "
          f"in every such case), the daemon blocking on the FUSE device; \"polling "
          f"1 ms\" = `ROIFS_FUSE_POLL_US=1000`, the adaptive polling; \"no pt\" = `[mount] passthrough = false`. Fresh = "
          f"first read after mounting, repeat = median of three further reads on the same mount "
          f"(plain: of three reads after one that fills the page cache). \"squashfuse_ll\" = "
          f"Debian's squashfuse_ll serving an uncompressed squashfs image of the same chunk "
          f"files: the FUSE floor of this machine. Chunk files: " +
          ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in sizes.items()) +
          ". (Idle CPU of the mount cases includes mounting and unmounting.) Targets: ≥ 0.9× "
          "for zarr-python, ≥ 0.8× for raw reads and cat.\n\n")
    for arr, (shape, chunks) in ARRAYS.items():
        mib = np.prod(shape) * 2 / 2**20
        nfiles = int(np.prod([s // c for s, c in zip(shape, chunks)]))
        md += (f"**{arr}**: {'×'.join(map(str, shape))} uint16 ({mib:.0f} MiB decoded), chunks "
               f"{'×'.join(map(str, chunks))}, {nfiles} chunk files.\n\n")
        hdr = ["encoding", "reader", "plain folder"]
        for c in COLS:
            if any(len(row) > 3 + 2 * COLS.index(c) for row in tables[arr]):
                hdr += [f"{LABELS[c[0]]}, {c[1]}", "ratio"]
        md += C.md_table(hdr, tables[arr]) + "\n\n"
    md += ("FUSE requests the daemon received per chunk file opened (the status file's "
           "`fuse.requests` over the read, divided by the number of chunk files; medians):\n\n" +
           C.md_table(["array", "encoding", "reader", "mount", "requests per file (total)"],
                      req_rows) + "\n\n")
    md += ("CPU time per read (medians, seconds): the reader (this process and `cat`) and the "
           "daemon, beside the wall time:\n\n" +
           C.md_table(["array", "encoding", "reader", "mount", "wall", "reader CPU",
                       "daemon CPU"], cpu_rows) + "\n\n")
    if calls:
        plain = {k: C.median([x[k] for x in calls["plain_s"]]) for k in calls["plain_s"][0]}
        mount = {k: C.median([x[k] for x in calls["mount_per call_s"]])
                 for k in calls["mount_per call_s"][0]}
        rows = [[k, f"{plain[k] * 1e3:.1f}", f"{mount[k] * 1e3:.1f}",
                 f"{(mount[k] - plain[k]) / 128 * 1e6:+.0f}"] for k in plain]
        rows.append(["all", f"{sum(plain.values()) * 1e3:.1f}",
                     f"{sum(mount.values()) * 1e3:.1f}",
                     f"{(sum(mount.values()) - sum(plain.values())) / 128 * 1e6:+.0f}"])
        md += ("Per call, raw reads of the 128 files of the 2 MiB-chunk array, no compressor "
               "(ms summed over the files, medians; the mount read once before):\n\n" +
               C.md_table(["call", "plain folder (ms)", "mount, passthrough (ms)",
                           "difference per file (µs)"], rows))

    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(11, 4.4))
    keys = list(plot)
    x = np.arange(len(keys))
    labels = ["as shipped (passthrough), fresh", "as shipped, repeat",
              "squashfuse_ll, fresh", "squashfuse_ll, repeat",
              "polling 1 ms, fresh", "polling 1 ms, repeat",
              "passthrough off, fresh (READs via the daemon)",
              "passthrough off, repeat (FUSE page cache)"]
    w = 0.1
    for j, lab in enumerate(labels):
        ax.bar(x + (j - 3.5) * w, [plot[k][j] for k in keys], w, label=lab)
    ax.axhline(0.8, color="k", ls="--", lw=0.8, label="target 0.8")
    ax.axhline(1.0, color="grey", ls=":", lw=0.8)
    short = {"zarr-python z[:]": "zarr", "zarr-python, blosc threads off": "zarr\n1 blosc thr.",
             "raw Python read()": "raw read()", "cat": "cat"}
    ax.set_xticks(x, [f"{'2 MiB' if a == SMALL else 'FOV'}\n{e}\n{short.get(r, r)}"
                      for a, e, r in keys], fontsize=6)
    ax.set_ylabel("plain-folder time / mount time (median)")
    ax.set_title("Warm full read: mount vs the same files in a plain folder")
    ax.legend(fontsize=7)
    C.save_figure(fig, "warm")
    C.save("warm", "4. Warm reads", summary, md, raw, info)


if __name__ == "__main__":
    if sys.argv[1:] == ["--replot"]:
        doc = json.loads((C.RESULTS / "warm.json").read_text())
        C.IDLE.update(doc.get("idle_cores", {}))
        report(doc["raw"], doc["machine"], len(next(iter(doc["raw"].values()))["plain_s"]))
    else:
        main()
