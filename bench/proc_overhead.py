"""Per-ROI overhead of each processor kind: 10,000 ROIs of 32x32 over a 3200x3200 uint16
array (chunks 800x800, no compression), f = add 1, as builtin, C plugin
(examples/plugins/add_plugin.c), Python worker (roifs.worker.run) and Python function
(`python =`, the fork server). ROIS=100k: 102,400 ROIs over 10240x10240 (chunks 1024x1024).

Each run: mount (fresh cache), cold full read with zarr-python, unmount; the kinds are
interleaved, REPS times each (default 3). Reported: median seconds per kind, and the
overhead against the builtin of the same runs, (kind - builtin) / 10,000 per ROI.
Targets: plugin within 20 us of builtin per ROI, Python worker within 0.3 ms, python within
15 us (issue 18, at 100,000 ROIs).

    /usr/bin/python3 bench/proc_overhead.py      (REPS=5 for more repeats)
"""
import os
import sys
import time
from pathlib import Path

import numpy as np
import zarr

import common as C

REPS = int(os.environ.get("REPS", 3))
N, CH, T = (10240, 1024, 32) if os.environ.get("ROIS") == "100k" else (3200, 800, 32)
NROIS = (N // T) ** 2
TARGETS_US = {"plugin": 20, "worker": 300, "python": 15}

WORKER = """\
import numpy as np
from roifs.worker import run

ONE = np.uint16(1)

def process(block, roi):
    return block + ONE

run(process)
"""


def interpreters_cpu_s():
    """CPU seconds of the Python processes serving the mount (fork server and workers, or
    worker scripts), read before the unmount ends them."""
    tot = 0.0
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
            if b"roifs._server" not in cmd and b"add1_worker.py" not in cmd:
                continue
            f = (p / "stat").read_text().rpartition(")")[2].split()
            tot += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            continue
    return tot


def main():
    plugin = Path(C.ROIFS).parent / "examples" / "plugins" / "libadd_plugin.so"
    if not plugin.exists():
        sys.exit(f"{plugin} is not built")
    info = C.machine()
    os.environ.setdefault("ROIFS_PYTHONPATH", str(C.REPO / "python"))
    with C.scratch("proc_overhead") as d:
        inp = d / "in.zarr"
        data = C.random_input(inp, (N, N), (CH, CH), 0, high=60000, lz4=False)
        expected = data + 1
        (d / "add1_worker.py").write_text(WORKER)
        kinds = {
            "builtin": {"builtin": "add", "param.value": 1},
            "plugin": {"plugin": plugin, "param.value": 1},
            "worker": {"worker": f"{C.PY} add1_worker.py"},
            "python": {"python": "add1_worker.py:process"},
        }
        cfgs = {k: C.write_config(d / f"{k}.ini", {
            "input": {"path": inp},
            "rois": {"grid": f"{T},{T}"},
            "process": {**proc, "threads": 0},
            "output": {"compressor": "none"},
            "cache": {"dir": d / f"cache-{k}"}}) for k, proc in kinds.items()}

        cpu = {k: [] for k in kinds}

        def case(kind):
            def run():
                C.rmtree(d / f"cache-{kind}")
                t0 = time.perf_counter()
                with C.Mount(cfgs[kind], d / "mnt") as m:
                    got = zarr.open(str(m.mnt), mode="r")[:]
                    st = m.status()
                    cpu[kind].append((m.cpu_s(), interpreters_cpu_s()))
                total = time.perf_counter() - t0
                assert st["calls"] == NROIS and st["rois"]["failed"] == 0, st
                assert np.array_equal(got, expected), kind
                return total
            return run

        load0 = C.loadavg()
        res = C.interleaved(REPS, {k: case(k) for k in kinds})
        load1 = C.loadavg()

    med = {k: C.median(v) for k, v in res.items()}
    cpu_med = {k: C.median([a + b for a, b in v]) for k, v in cpu.items()}
    rows, summary = [], []
    for k in kinds:
        over_us = (med[k] - med["builtin"]) / NROIS * 1e6
        cpu_us = (cpu_med[k] - cpu_med["builtin"]) / NROIS * 1e6
        target = TARGETS_US.get(k)
        rows.append([k, f"{med[k]:.2f}", " / ".join(f"{x:.2f}" for x in res[k]),
                     "—" if k == "builtin" else f"{over_us:+.1f} µs",
                     f"{cpu_med[k]:.2f}" + ("" if k == "builtin" else f" ({cpu_us:+.1f} µs)"),
                     f"≤ {target} µs" if target else "",
                     ("yes" if over_us <= target else "NO") if target else ""])
        if target:
            summary.append({"scenario": f"per-ROI overhead of {k} over the builtin, {NROIS} "
                                        f"ROIs of {T}x{T}",
                            "roifs": f"{over_us:+.1f} µs wall, {cpu_us:+.1f} µs CPU",
                            "alternative": f"builtin {med['builtin']:.2f} s",
                            "ratio": f"{med[k] / med['builtin']:.2f}×",
                            "target": f"≤ {target} µs", "met": over_us <= target})
    head = (f"{NROIS} ROIs of {T}x{T}, {N}x{N} <u2, chunks {CH}x{CH}, no compression, "
            f"threads = {info['nproc']} (nproc), {REPS} interleaved repeats; medians of mount "
            f"+ cold read with zarr-python + unmount; CPU: the daemon and its Python processes "
            f"(fork server and workers, or worker scripts); load average {' '.join(load0)} "
            f"at the start, {' '.join(load1)} at the end.\n\n")
    md = head + C.md_table(["kind", "median s (mount + cold read + unmount)", "runs",
                            "overhead per ROI vs builtin (wall)",
                            "CPU s, median (per ROI over the builtin)", "target", "met"], rows)
    print(md)
    raw = {k: {"wall_s": res[k], "cpu_s": cpu[k]} for k in kinds}
    C.save("proc_overhead" + ("_100k" if NROIS > 20000 else ""),
           f"Per-ROI overhead of each processor kind ({NROIS} ROIs)", summary, md, raw, info)


if __name__ == "__main__":
    main()
