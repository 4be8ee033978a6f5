"""Bad configurations, inputs and ROI lists
(docs/operations.md#mounting-checking-unmounting-exit-status, docs/configuration.md): exit status
2, a message that starts with "roifs: " and names FILE:LINE (and the key or value), from both
`check` and `mount`, and nothing gets mounted. Plus the basic command line."""
import json
import os
import re
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import is_mounted, lazy_unmount, make_task, run_roifs

SHAPE, CHUNKS = (30, 40), (10, 10)
# 7 ROIs touching 5 of the 12 chunks: (0,0) (0,1) (1,1) (2,3) (1,0)
ROIS = [((0, 5), (0, 5)), ((2, 8), (12, 18)), ((12, 18), (12, 18)), ((25, 30), (35, 40)),
        ((11, 19), (1, 9)), ((0, 3), (0, 3)), ((13, 15), (13, 15))]

BASE_INI = """\
[input]
path = in.zarr

[rois]
file = rois.txt

[process]
builtin = add
param.value = 1
threads = 2

[output]
compressor = blosc

[cache]
dir = {cache}
"""


def base_task(tmp_path):
    data = np.arange(np.prod(SHAPE), dtype="<i2").reshape(SHAPE)
    task = make_task(tmp_path, data, CHUNKS, rois=ROIS)
    task.config.write_text(BASE_INI.format(cache=task.cache))
    return task


def edit_ini(task, old, new):
    text = task.config.read_text()
    assert old in text, f"test bug: {old!r} not in config"
    task.config.write_text(text.replace(old, new, 1))


def lines_matching(path, pattern):
    return [n for n, l in enumerate(path.read_text().splitlines(), 1) if re.search(pattern, l)]


@dataclass
class Expect:
    file: object          # Path of the file the message must name
    lines: list           # acceptable line numbers; [] = no line required
    words: tuple = ()     # each must appear in the message (case-insensitive)


def ini_case(old, new, pattern, *words):
    """Replaces old by new in the config; the error must point at a line matching pattern."""
    def mutate(task):
        edit_ini(task, old, new)
        return Expect(task.config, lines_matching(task.config, pattern), words)
    return mutate


def roi_case(line, *words):
    """Puts a bad ROI line after a comment and a blank line, at line 4 of rois.txt."""
    def mutate(task):
        good = [l for l in task.rois_file.read_text().splitlines() if not l.startswith("#")]
        task.rois_file.write_text("\n".join(["# z, y", good[0], "", line] + good[1:]) + "\n")
        return Expect(task.rois_file, [4], words)
    return mutate


def zarray_case(edit, *words):
    def mutate(task):
        zpath = task.input / ".zarray"
        zpath.write_text(edit(zpath.read_text()))
        return Expect(zpath, [], words)
    return mutate


def no_path(task):
    edit_ini(task, "path = in.zarr", "level = 0")
    return Expect(task.config, [], ("path",))


def no_processor(task):
    edit_ini(task, "builtin = add\n", "")
    return Expect(task.config, [], ())


def set_dtype(text, dtype):
    meta = json.loads(text)
    meta["dtype"] = dtype
    return json.dumps(meta, indent=4)


CASES = {
    "syntax-error": ini_case("threads = 2", "threads = 2\nthis line is not ini", "not ini"),
    "unclosed-section": ini_case("[output]", "[output", r"^\[output$"),
    "unknown-section": ini_case("[cache]", "[bogus]\nkey = 1\n\n[cache]", r"bogus|key = 1",
                                "bogus"),
    "unknown-key": ini_case("threads = 2", "threads = 2\ncolour = blue", "colour", "colour"),
    "missing-input-path": no_path,
    "input-does-not-exist": ini_case("path = in.zarr", "path = nope.zarr", "nope", "nope.zarr"),
    "zarray-invalid-json": zarray_case(lambda t: t[: len(t) // 2] + "\n,,]", ".zarray"),
    "zarray-unsupported-dtype": zarray_case(lambda t: set_dtype(t, "<c16"), "c16"),
    "roi-out-of-bounds": roi_case("0:5, 0:41"),
    "roi-negative": roi_case("-1:5, 0:4"),
    "roi-wrong-ndim": roi_case("0:5"),
    "roi-too-many-dims": roi_case("0:5, 0:5, 0:5"),
    "roi-empty-range": roi_case("5:5, 0:4"),
    "roi-reversed-range": roi_case("6:5, 0:4"),
    "roi-not-integer": roi_case("0:1.5, 0:4"),
    "roi-not-a-number": roi_case("a:b, 0:4"),
    "two-processors": ini_case("builtin = add", "builtin = add\ncommand = /bin/cat",
                               r"builtin = add|command = /bin/cat"),
    "no-processor": no_processor,
    "two-roi-sources": ini_case("file = rois.txt", "file = rois.txt\ngrid = 10,10",
                                r"file = rois|grid = 10"),
    "unknown-builtin": ini_case("builtin = add", "builtin = frobnicate", "frobnicate",
                                "frobnicate"),
    "threads-negative": ini_case("threads = 2", "threads = -1", "threads", "threads"),
    "threads-not-a-number": ini_case("threads = 2", "threads = many", "threads", "threads"),
    "compressor-unknown": ini_case("compressor = blosc", "compressor = lz5", "lz5", "lz5"),
    "outside-unknown": ini_case("compressor = blosc", "outside = sideways", "sideways",
                                "sideways"),
    "dtype-unknown": ini_case("compressor = blosc", "dtype = <q7", "q7", "q7"),
    "chunks-wrong-ndim": ini_case("compressor = blosc", "chunks = 10", "chunks", "chunks"),
    "separator-unknown": ini_case("compressor = blosc", "dimension_separator = :",
                                  "dimension_separator", "dimension_separator"),
    "outside-input-other-dtype": ini_case("compressor = blosc",
                                          "dtype = <f4\noutside = input", "dtype|outside"),
    "rois-file-missing": ini_case("file = rois.txt", "file = missing.txt", "missing",
                                  "missing.txt"),
}


def assert_bad(res, expect):
    out = f"exit {res.returncode}\nstdout: {res.stdout}\nstderr: {res.stderr}"
    assert res.returncode == 2, out
    msgs = [l for l in res.stderr.splitlines() if l.strip()]
    assert msgs and msgs[0].startswith("roifs: "), out
    name = re.escape(os.path.basename(expect.file))
    if expect.lines:
        where = re.compile(rf"{name}:({'|'.join(map(str, expect.lines))})(?!\d)")
    else:
        where = re.compile(name)
    assert any(l.startswith("roifs: ") and where.search(l) for l in msgs), \
        f"no 'roifs: ' line naming {where.pattern}\n{out}"
    for w in expect.words:
        assert w.lower() in res.stderr.lower(), f"message does not name {w!r}\n{out}"


@pytest.mark.parametrize("command", ["check", "mount"])
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(tmp_path, roifs_bin, case, command):
    task = base_task(tmp_path)
    expect = CASES[case](task)
    if command == "check":
        assert_bad(run_roifs(roifs_bin, "check", task.config), expect)
        return
    task.mnt.mkdir()
    try:
        res = run_roifs(roifs_bin, "mount", task.config, task.mnt, timeout=20)
        assert not is_mounted(task.mnt), "a bad configuration got mounted"
        assert_bad(res, expect)
    finally:
        if is_mounted(task.mnt):
            lazy_unmount(task.mnt)


def test_valid_task_is_valid(tmp_path, roifs_bin):
    """Guards the cases above: the base task they break is accepted."""
    task = base_task(tmp_path)
    res = run_roifs(roifs_bin, "check", task.config)
    assert res.returncode == 0, res.stderr


def test_check_reports_shape_rois_chunks(tmp_path, roifs_bin):
    task = base_task(tmp_path)
    res = run_roifs(roifs_bin, "check", task.config)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert re.search(r"shape\D*30\D+40\b", out, re.I), out
    assert re.search(r"\b7\s+rois?\b|\brois?\b\D*\b7\b", out, re.I), out
    touched = [l for l in out.splitlines() if re.search(r"chunk", l, re.I)
               and re.search(r"(?<![\d.])5(?![\d.])", l)]
    assert touched, f"chunks touched (5) not reported:\n{out}"


def test_help(roifs_bin):
    res = run_roifs(roifs_bin, "--help")
    assert res.returncode == 0, res.stderr
    text = (res.stdout + res.stderr).lower()
    assert "usage" in text and "mount" in text and "check" in text, text


def test_version(roifs_bin):
    res = run_roifs(roifs_bin, "--version")
    assert res.returncode == 0, res.stderr
    assert re.search(r"\d+\.\d+", res.stdout + res.stderr)


@pytest.mark.parametrize("args", [["frobnicate"], [], ["mount"], ["mount", "CONFIG"],
                                  ["check"], ["unmount"], ["mount", "--bogus-option",
                                                           "CONFIG", "MNT"]],
                         ids=["unknown-subcommand", "no-args", "mount-no-args",
                              "mount-no-mountpoint", "check-no-config", "unmount-no-args",
                              "unknown-option"])
def test_bad_usage(tmp_path, roifs_bin, args):
    task = base_task(tmp_path)
    task.mnt.mkdir()
    args = [{"CONFIG": task.config, "MNT": task.mnt}.get(a, a) for a in args]
    try:
        res = run_roifs(roifs_bin, *args)
        assert not is_mounted(task.mnt)
    finally:
        if is_mounted(task.mnt):
            lazy_unmount(task.mnt)
    assert res.returncode == 2, f"exit {res.returncode}: {res.stderr}"
    assert any(l.startswith("roifs: ") for l in res.stderr.splitlines()), res.stderr
