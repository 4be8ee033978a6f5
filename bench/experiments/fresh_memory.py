"""EXPERIMENT (not run by bench/run.sh): what memory costs the first time it is touched on this
machine, and how much of bench/segmentation.py's spread that explains.

This machine is a VM whose balloon device does free page reporting (virtio-balloon feature bit
5, VIRTIO_BALLOON_F_REPORTING: see /sys/bus/virtio/devices/*/features of the device with
id 0x0005). Memory the guest frees in large blocks is handed back to the host about two
seconds later; the next time the guest uses those pages, the host has to find and zero memory
for them again, and the vCPU that touched them waits. So a page the kernel hands out can cost
anything from a plain clear_page to a host fault, depending on how long ago it was freed.
Every page-cache page a write fills and every fresh anonymous page (numpy's result arrays,
whose pages are zeroed on first touch) pays this.

Part 1 touches N MiB of fresh anonymous memory (with MADV_HUGEPAGE, as numpy asks for large
arrays), frees it, touches it again at once, and again after a pause of QUIET seconds.

Part 2 runs bench/segmentation.py's roifs contender (a fresh mount of its task, the whole array
read with zarr-python) REPS times each way, interleaved: plain, and right after the harness
touched and freed PRETOUCH MiB, so that the guest's free lists hold pages the host still backs.
It prints roifs's work phase (the read of a ready mount) and the daemon's system time.

Part 3 runs all four contenders of bench/segmentation.py (its scripts, its measure) REPS times
each, interleaved, every run right after the harness touched and freed PRETOUCH MiB: the
comparison on a machine where fresh memory costs what it costs on bare metal.

usage: fresh_memory.py [N [QUIET [REPS [PRETOUCH]]]]   (default 256 4 6 1500)
"""
import ctypes
import mmap
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common as C  # noqa: E402
import segmentation as S  # noqa: E402

MADV_HUGEPAGE = 14


def touch(mib):
    """MB/s of writing one byte per 4 KiB page of a fresh anonymous mapping."""
    n = mib << 20
    t0 = time.perf_counter()
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    ctypes.CDLL(None).madvise(ctypes.c_void_p(addr), ctypes.c_size_t(n), MADV_HUGEPAGE)
    ctypes.memset(addr, 1, n)
    dt = time.perf_counter() - t0
    del addr
    m.close()
    return mib / dt


def part1(mib, quiet):
    print(f"part 1: {mib} MiB of fresh memory (MADV_HUGEPAGE), MB/s")
    touch(mib)
    print(f"  touched again at once:      {touch(mib):8.0f}")
    print(f"  touched again at once:      {touch(mib):8.0f}")
    time.sleep(quiet)
    print(f"  after {quiet} s freed:           {touch(mib):8.0f}")
    print(f"  touched again at once:      {touch(mib):8.0f}")


def part2(reps, pretouch):
    print(f"part 2: bench/segmentation.py's roifs contender, {reps} interleaved runs each way")
    with C.scratch("fresh-memory") as d:
        cfg, env = S.prepare(d)
        res = {"plain": [], "pretouched": []}
        for _ in range(reps):
            for mode in res:
                C.rmtree(d / "cache")
                time.sleep(3)  # the last run's memory goes back to the host
                if mode == "pretouched":
                    touch(pretouch)
                r = S.run_case(d, cfg, env, "roifs")
                res[mode].append(r)
                print(f"  {mode:10s} phase {r['phase_s']:.3f} s, daemon system time "
                      f"{r['daemon_sys_s']:.2f} s", flush=True)
        for mode, v in res.items():
            print(f"  {mode:10s} median phase "
                  f"{statistics.median(r['phase_s'] for r in v):.3f} s, daemon system "
                  f"{statistics.median(r['daemon_sys_s'] for r in v):.2f} s")


def part3(reps, pretouch):
    print(f"part 3: bench/segmentation.py's contenders, {reps} interleaved runs, each after "
          f"{pretouch} MiB touched and freed")
    with C.scratch("fresh-memory") as d:
        cfg, env = S.prepare(d)
        res = {n: [] for n in S.SCRIPTS}
        for i in range(reps):
            names = list(res)
            for name in names[i % 4:] + names[:i % 4]:
                touch(pretouch)
                r = S.run_case(d, cfg, env, name)
                res[name].append(r)
                print(f"  {name:7s} wall {r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s, "
                      f"phase {r['phase_s']:.2f} s", flush=True)
        ideal = statistics.median(r["compute_s"] for r in res["serial"]) / 2
        pool = statistics.median(r["wall_s"] for r in res["pool2"])
        for name, v in res.items():
            wall = statistics.median(r["wall_s"] for r in v)
            phase = statistics.median(r["phase_s"] for r in v)
            print(f"  {name:7s} median wall {wall:.2f} s ({wall / pool:.2f}x pool(2)), "
                  f"phase {phase:.2f} s ({phase / ideal:.2f}x the ideal {ideal:.2f} s)")


def main():
    args = [int(a) for a in sys.argv[1:]] + [256, 4, 6, 1500][len(sys.argv) - 1:]
    mib, quiet, reps, pretouch = args[:4]
    part1(mib, quiet)
    part2(reps, pretouch)
    part3(reps, pretouch)


if __name__ == "__main__":
    main()
