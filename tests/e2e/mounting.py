"""The mount table, roifs daemons and task files, for the end-to-end tests (conftest.py
re-exports these) and the benchmarks (bench/common.py imports this file): one copy of each.

Imports nothing beyond the standard library, so that bench/ can use it without pytest.
"""
import json
import os
import re
import subprocess
from pathlib import Path

# ---------------------------------------------------------------- mount table


def _unescape(s):
    """A mountinfo field with its octal escapes (\\040 for a blank) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mountinfo_entry(mnt):
    """(fields before " - ", fields after it) of the mount at mnt in /proc/self/mountinfo,
    or None when nothing is mounted there. The mount point is fields[0][4]; the type, source
    and superblock options are fields[1][0:3]."""
    mnt = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.rstrip("\n").partition(" - ")
            fields = left.split(" ")
            if _unescape(fields[4]) == mnt:
                return fields, right.split(" ")
    return None


def fuse_mounts():
    """Mount points of all FUSE mounts in /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype = right.split(" ", 1)[0]
            if fstype.startswith("fuse"):
                out.append(_unescape(left.split(" ")[4]))
    return out


def is_mounted(mnt):
    return mountinfo_entry(mnt) is not None


def lazy_unmount(mnt):
    subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, timeout=30)


# ---------------------------------------------------------------- processes


def daemon_pid(mnt):
    """PID of the roifs daemon serving mnt (found by its command line), or None."""
    mnt = str(mnt)
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if len(args) >= 4 and "roifs" in os.path.basename(args[0]) and "mount" in args and \
                args[-1] == mnt:
            return int(p.name)
    return None


def pid_alive(pid):
    """True while pid runs (a zombie waiting for its parent does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------- task files


def roi_text(roi, shape=None):
    """((a,b),(c,d)) -> 'a:b, c:d'; with shape, a range covering a whole dimension is ':'."""
    parts = []
    for d, (a, b) in enumerate(roi):
        full = shape is not None and a == 0 and b == shape[d]
        parts.append(":" if full else f"{a}:{b}")
    return ", ".join(parts)


def write_config(path, sections, extra=""):
    """sections: {name: {key: value}} written in order; a value None drops the key, a
    section None the section. Returns the path."""
    lines = []
    for name, kv in sections.items():
        if kv is None:
            continue
        lines.append(f"[{name}]")
        lines += [f"{k} = {v}" for k, v in kv.items() if v is not None]
        lines.append("")
    Path(path).write_text("\n".join(lines) + extra)
    return Path(path)


def read_status(mnt):
    """MNT/.roifs/status as a dict (docs/mounted-tree.md#status-file)."""
    with open(os.path.join(mnt, ".roifs", "status"), "rb") as f:
        return json.loads(f.read())
