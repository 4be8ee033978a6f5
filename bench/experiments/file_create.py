"""EXPERIMENT (not run by bench/run.sh): what creating a file costs on the file system of the
cache, measured the way roifs pays it (one new inode per chunk file: the temporary file it
writes and renames into place).

A cold read of 100,000 ROIs of 32x32 (bench/scaling.py) writes 1,600 chunk files. On this
machine's ext4 (no journal) `perf record -g build/roifs warm -j 1 task.ini` puts 31-41 % of
the daemon's samples in ext4_create -> __ext4_new_inode -> find_inode_bit -> recently_deleted:
without a journal, ext4 skips over the inodes freed in the last half minute or so when it looks
for a free one, reading each one's inode-table block, so a create costs whatever the file
system's recent history makes it. This script shows the range: rounds of N creates of empty
files in a fresh directory, each round after QUIET seconds in which nothing was deleted, and
again right after deleting those N files; microseconds of wall and of system time per create.
usage: file_create.py [DIR [N [ROUNDS [QUIET]]]]   (default /tmp/roifs-file-create 1600 3 40)
"""
import os
import shutil
import sys
import time


def creates(d, n):
    os.makedirs(d)
    c0, t0 = os.times(), time.perf_counter()
    for i in range(n):
        os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o600))
    wall, c1 = time.perf_counter() - t0, os.times()
    return wall / n * 1e6, (c1.system - c0.system) / n * 1e6


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else "/tmp/roifs-file-create"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1600
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    quiet = float(sys.argv[4]) if len(sys.argv) > 4 else 40
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    try:
        for r in range(rounds):
            time.sleep(quiet)
            a = creates(f"{base}/a{r}", n)
            shutil.rmtree(f"{base}/a{r}")
            b = creates(f"{base}/b{r}", n)
            shutil.rmtree(f"{base}/b{r}")
            print(f"round {r}: after {quiet:.0f} s without deletions {a[0]:.1f} µs/create "
                  f"(system {a[1]:.1f}); right after deleting {n} files {b[0]:.1f} µs/create "
                  f"(system {b[1]:.1f})", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
