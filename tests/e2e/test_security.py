"""Security properties of a mount (SPEC §2, §5): read-only for every tool and syscall, even
when `-o rw` is asked for; allow_other only when asked (and then really letting other users
in); a private (0700) cache directory whatever the umask; chunk names accepted only in
canonical form (everything else ENOENT); and nothing from the input's metadata ever used as
a path (a .zarray whose dimension_separator is a path fragment is refused with exit 2)."""
import errno
import itertools
import json
import os
import shutil
import stat
import subprocess

import numpy as np
import pytest

from conftest import is_mounted, make_task, mountinfo_entry, read_bytes, run_roifs, world_dir

SHAPE, CHUNKS = (12, 12), (4, 4)  # a 3 x 3 chunk grid


def chunk_rois(shape, chunks):
    """One ROI per chunk: reading one chunk runs exactly one ROI (readahead is off)."""
    grid = [range(0, s, c) for s, c in zip(shape, chunks)]
    return [tuple((a, min(a + c, s)) for a, c, s in zip(starts, chunks, shape))
            for starts in itertools.product(*grid)]


def task_2d(tmp_path, separator=".", shape=SHAPE, chunks=CHUNKS):
    inp = np.arange(np.prod(shape), dtype="<u2").reshape(shape)
    return make_task(tmp_path, inp, chunks, rois=chunk_rois(shape, chunks),
                     process={"builtin": "add", "param.value": 1, "threads": 2,
                              "readahead": 0},
                     output={"compressor": "none", "dimension_separator": separator})


def mount_options(mnt):
    """(per-mount options, superblock options) of mnt from /proc/self/mountinfo."""
    entry = mountinfo_entry(mnt)
    assert entry, f"{mnt} is not mounted"
    fields, right = entry
    return set(fields[5].split(",")), set(right[2].split(","))


def run(*args, **kw):
    return subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=30, **kw)


def as_nobody(fn):
    """Runs fn() in a forked child with the uid/gid of nobody; returns its errno (0 if fn
    succeeded)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            fn()
        except OSError as e:
            code = e.errno or 255
        except BaseException:
            code = 255
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


# ---------------------------------------------------------------- read-only


@pytest.mark.parametrize("extra", [(), ("-o", "rw")], ids=["default", "o-rw"])
def test_read_only_for_shell_tools(tmp_path, mount, extra):
    """touch, mkdir, rm, mv, cp onto, ln, chmod, truncate, tee: all fail with "Read-only file
    system", even when the user asks for `-o rw`; nothing changes in the tree."""
    task = task_2d(tmp_path)
    with mount(task.config, args=extra) as m:
        before = sorted(os.listdir(m.path))
        chunk = read_bytes(m / "1.1")
        src = tmp_path / "payload"
        src.write_bytes(b"x" * 32)
        commands = {
            "touch new": ["touch", m / "new"],
            "touch chunk": ["touch", m / "1.1"],
            "touch -d chunk": ["touch", "-d", "2001-01-01", m / "1.1"],
            "mkdir": ["mkdir", m / "dir"],
            "mkdir in .roifs": ["mkdir", m / ".roifs" / "dir"],
            "rm chunk": ["rm", "-f", m / "1.1"],
            "rm .zarray": ["rm", "-f", m / ".zarray"],
            "rm -r .roifs": ["rm", "-rf", m / ".roifs"],
            "rmdir .roifs": ["rmdir", m / ".roifs"],
            "mv chunk": ["mv", m / "1.1", m / "2.2.bak"],
            "mv out": ["mv", m / "1.1", tmp_path / "stolen"],
            "mv in": ["mv", src, m / "9.9"],
            "cp onto chunk": ["cp", src, m / "1.1"],
            "cp new": ["cp", src, m / "new"],
            "ln -s": ["ln", "-s", "1.1", m / "link"],
            "ln": ["ln", m / "1.1", m / "hard"],
            "chmod": ["chmod", "666", m / "1.1"],
            "chmod dir": ["chmod", "777", m.path],
            "truncate": ["truncate", "-s", "0", m / "1.1"],
            "tee": ["tee", m / "1.1"],
            "dd": ["dd", f"of={m / '1.1'}", "conv=notrunc", "count=0"],
        }
        wrong = {}
        for name, cmd in commands.items():
            r = run(*cmd, input="data")
            if r.returncode == 0 or "Read-only file system" not in r.stderr:
                wrong[name] = (r.returncode, r.stderr.strip()[-200:])
        assert not wrong, f"expected 'Read-only file system' failures: {wrong}"

        # the same from Python, for the syscalls the tools above may not make
        attempts = {
            "O_WRONLY|O_CREAT": lambda: os.open(m / "x", os.O_WRONLY | os.O_CREAT, 0o600),
            "O_RDONLY|O_CREAT (new)": lambda: os.open(m / "x", os.O_RDONLY | os.O_CREAT),
            "O_RDONLY|O_TRUNC": lambda: os.open(m / "1.1", os.O_RDONLY | os.O_TRUNC),
            "O_APPEND": lambda: os.open(m / ".zattrs", os.O_WRONLY | os.O_APPEND),
            "mknod": lambda: os.mknod(m / "fifo", 0o600 | stat.S_IFIFO),
            "utime": lambda: os.utime(m / "1.1", (0, 0)),
            "chown": lambda: os.chown(m / "1.1", 1, 1),
            "setxattr": lambda: os.setxattr(m / "1.1", "user.x", b"1"),
            "removexattr": lambda: os.removexattr(m / "1.1", "user.x"),
            "rename .roifs": lambda: os.rename(m / ".roifs", m / "r"),
        }
        for name, fn in attempts.items():
            try:
                r = fn()
                if isinstance(r, int):
                    os.close(r)
                wrong[name] = "succeeded"
            except OSError as e:
                # removexattr of a missing attribute may be refused before the ro check
                ok = (errno.EROFS, errno.ENODATA) if name == "removexattr" else (errno.EROFS,)
                if e.errno not in ok:
                    wrong[name] = errno.errorcode.get(e.errno, e.errno)
        assert not wrong, f"expected EROFS: {wrong}"

        assert sorted(os.listdir(m.path)) == before
        assert read_bytes(m / "1.1") == chunk
        assert stat.S_IMODE(os.stat(m / "1.1").st_mode) & 0o222 == 0
        assert src.exists()  # (mv out copies first: the copy may exist, the chunk stays)
        if not extra:  # (with -o rw the kernel mount is rw: roifs itself refuses writes)
            assert "ro" in mount_options(m.path)[0], mount_options(m.path)


# ---------------------------------------------------------------- allow_other


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
@pytest.mark.parametrize("allow_other", [False, True])
def test_allow_other_only_when_asked(tmp_path, mount, allow_other):
    task = task_2d(tmp_path)
    args = ("-o", "allow_other") if allow_other else ()
    with world_dir("roifs-sec-") as d, mount(task.config, mnt=d / "mnt", args=args) as m:
        opts, super_opts = mount_options(m.path)
        assert ("allow_other" in super_opts) == allow_other, (opts, super_opts)
        assert "ro" in opts, opts
        err = as_nobody(lambda: read_bytes(m.path / "1.1"))
        if allow_other:
            assert err == 0, f"user nobody cannot read with allow_other: errno {err}"
        else:
            assert err == errno.EACCES, f"user nobody got errno {err}, expected EACCES"
        assert read_bytes(m / "1.1")  # root, the owner, always can


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_overlay_shared_lets_users_read_only_what_the_input_lets_them(mount):
    """ome = labels mounted by root with allow_other: user nobody reads through the overlay
    only what it may read in the input itself (the input's owners and modes are shown, without
    write): a world-readable file yes; a root-only file of the image, a link in the image to
    a root-only file elsewhere, and such a link swapped in for nobody's own file right after
    nobody looked at it (the kernel still holding the old attributes) no; the label image
    stays readable by all."""
    from test_overlay import make_image, overlay_config
    with world_dir("roifs-sec-") as d:
        img, levels = make_image(d, "0.4")
        secret = d / "secret"
        secret.write_text("root only")
        os.chmod(secret, 0o600)
        (img / "open.txt").write_text("anyone")
        os.chmod(img / "open.txt", 0o644)
        (img / "private.txt").write_text("root only")
        os.chmod(img / "private.txt", 0o600)
        os.symlink(secret, img / "link")
        (img / "drop").mkdir()
        os.chmod(img / "drop", 0o777)
        config = overlay_config(d, img)
        with mount(config, mnt=d / "mnt", args=("-o", "allow_other")) as m:
            st = os.stat(m / "private.txt")
            assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o400, 0)
            assert stat.S_IMODE(os.stat(m / "open.txt").st_mode) == 0o444
            assert as_nobody(lambda: read_bytes(m / "open.txt")) == 0
            assert as_nobody(lambda: read_bytes(m / "labels" / "seg" / "0" / ".zarray")) == 0
            for name in ("private.txt", "link"):
                assert as_nobody(lambda: read_bytes(m / name)) == errno.EACCES, name

            def swap():
                own = img / "drop" / "mine"
                own.write_text("mine")
                assert (m / "drop" / "mine").stat().st_size == 4  # attributes now cached
                own.unlink()
                os.symlink(secret, own)
                read_bytes(m / "drop" / "mine")
            assert as_nobody(swap) == errno.EACCES
            assert read_bytes(m / "link") == b"root only"  # root, the owner, can


def test_overlay_shared_lists_input_directories_as_the_user(mount):
    """ome = labels mounted by root with allow_other: user nobody looks up and lists the input's
    directories with its own rights, not root's. A directory nobody made in a writable part of
    the image, looked at through the overlay (the kernel holding its attributes, 0755), then
    swapped for a link to a root-only directory: its listing gives EACCES and no names, a name
    in it EACCES, whatever the kernel still holds; a root-only directory of the image too."""
    from test_overlay import make_image, overlay_config
    with world_dir("roifs-sec-") as d:
        img, levels = make_image(d, "0.4")
        vault = d / "vault"
        vault.mkdir()
        (vault / "secret-name.txt").write_text("root only")
        os.chmod(vault, 0o700)
        (img / "drop").mkdir()
        os.chmod(img / "drop", 0o777)
        (img / "closed").mkdir()
        (img / "closed" / "hidden-name.txt").write_text("x")
        os.chmod(img / "closed", 0o700)
        config = overlay_config(d, img)
        with mount(config, mnt=d / "mnt", args=("-o", "allow_other")) as m:
            assert as_nobody(lambda: os.listdir(m / "closed")) == errno.EACCES
            def swap(look):
                own = img / "drop" / "mine"
                own.mkdir()
                (own / "mine.txt").write_text("mine")
                assert os.listdir(m / "drop" / "mine") == ["mine.txt"]  # attributes cached
                (own / "mine.txt").unlink()
                own.rmdir()
                os.symlink(vault, own)
                try:
                    look(m / "drop" / "mine")
                finally:
                    os.unlink(own)

            assert as_nobody(lambda: swap(os.listdir)) == errno.EACCES  # 0: names listed
            assert as_nobody(lambda: swap(lambda p: os.stat(p / "secret-name.txt"))) == \
                errno.EACCES
            assert as_nobody(lambda: os.listdir(m / "drop")) == 0
            assert "hidden-name.txt" in os.listdir(m / "closed")  # root, the owner, can


# ---------------------------------------------------------------- cache directory


def tree_modes(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in [dirpath] + [os.path.join(dirpath, f) for f in filenames]:
            out[os.path.relpath(n, root)] = stat.S_IMODE(os.lstat(n).st_mode)
    return out


@pytest.mark.parametrize("where", ["config", "xdg"])
def test_cache_dir_private(tmp_path, mount, monkeypatch, where):
    """The cache directory (and its parents that roifs creates under $XDG_CACHE_HOME) is
    created 0700 even with umask 0, and nothing in it is writable by others."""
    task = task_2d(tmp_path)
    xdg = tmp_path / "xdg"
    if where == "xdg":
        text = task.config.read_text()
        task.config.write_text(text.replace(f"dir = {task.cache}", ""))
        monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    old = os.umask(0)
    try:
        with mount(task.config) as m:
            read_bytes(m / "0.0")
            read_bytes(m / "2.2")
    finally:
        os.umask(old)
    if where == "xdg":
        caches = list((xdg / "roifs").iterdir())
        assert len(caches) == 1, caches
        cache = caches[0]
        assert stat.S_IMODE(os.stat(xdg / "roifs").st_mode) == 0o700
    else:
        cache = task.cache
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    modes = tree_modes(cache)
    assert len(modes) > 2, modes  # the chunks were written there
    loose = {p: oct(mode) for p, mode in modes.items() if mode & 0o022}
    assert not loose, f"group/world-writable entries in the cache: {loose}"
    dirs = {p: oct(mode) for p, mode in modes.items()
            if os.path.isdir(os.path.join(cache, p)) and mode != 0o700}
    assert not dirs, f"cache subdirectories not 0700: {dirs}"


# ---------------------------------------------------------------- chunk names

LONG = "1" * 300


def expect_enoent(m, names):
    wrong = {}
    for name in names:
        for what, fn in (("stat", os.stat), ("open", read_bytes)):
            try:
                fn(m / name)
                wrong[f"{what} {name[:40]!r}"] = "exists"
            except OSError as e:
                if e.errno != errno.ENOENT:
                    wrong[f"{what} {name[:40]!r}"] = errno.errorcode.get(e.errno, e.errno)
    return wrong


FLAT_BAD = [
    "...", "0..0", ".0", "0.", "0.0.", ".0.0", "..0",            # dots that are not separators
    LONG, "0." + LONG, LONG + ".0",                              # over-long
    "a.0", "0.b", "0x1.0", "0.1e0", " 0.0", "0.0 ", "0.0\t", "0,0", "0_0", "0:0",
    "\u0661.0", "0.\uff10", "0.0\u200b",                         # non-ASCII digits, zero-width
    "00.0", "0.00", "01.1", "1.01", "000.000",                   # leading zeros
    "+1.0", "-0.0", "0.+1", "0.-0", "+0.+0",                     # signs
    "0", "1", "0.0.0", "1.1.1.1", "",                            # wrong arity
    "3.0", "0.3", "3.3", "18446744073709551616.0", "0.18446744073709551615",  # outside the grid
    "99999999999999999999999.0",
    "0/0", "0\\0",                                               # the other separators
]


def test_odd_chunk_names_flat(tmp_path, mount):
    task = task_2d(tmp_path)
    with mount(task.config) as m:
        assert read_bytes(m / "2.2")  # the canonical names work
        wrong = expect_enoent(m, [n for n in FLAT_BAD if n])
        assert not wrong, f"expected ENOENT: {wrong}"
        # "." and ".." never reach roifs: the kernel resolves them to the mount and its parent
        assert os.stat(m / ".").st_ino == os.stat(m.path).st_ino
        assert os.stat(m / "..").st_ino == os.stat(m.path.parent).st_ino
        assert os.path.samefile(m / ".." / "mnt" / "2.2", m / "2.2")
        assert m.alive()
        assert m.status()["calls"] == 1  # only the one real chunk computed


NESTED_SHAPE, NESTED_CHUNKS = (8, 12, 12), (4, 4, 4)  # a 2 x 3 x 3 chunk grid


def nested_bad():
    """Bad names at each level of a 2 x 3 x 3 nested grid whose valid chunks are i/j/k."""
    bad_component = ["00", "01", "+0", "-0", "+1", "a", "0x0", " 0", "0 ", "\u0660", LONG,
                     "0.0", "0.", ".0", "...", "18446744073709551616"]
    names = []
    for level in range(3):
        good = ["1", "2", "2"][:level]
        names += ["/".join(good + [c]) for c in bad_component]
        names.append("/".join(good + [str([2, 3, 3][level])]))  # just outside the grid
    names += ["1/2/2/0", "0/0/0/0/0"]  # one level too many: the chunk is a file
    names += ["0.0.0", "0", "0/0"]     # flat names, and directories are not chunks
    return names


def test_odd_chunk_names_nested(tmp_path, mount):
    task = task_2d(tmp_path, "/", NESTED_SHAPE, NESTED_CHUNKS)
    with mount(task.config) as m:
        assert read_bytes(m / "1" / "2" / "2")
        assert stat.S_ISDIR(os.stat(m / "1").st_mode) and stat.S_ISDIR(os.stat(m / "1/2").st_mode)
        names = nested_bad()
        too_deep = {"1/2/2/0", "0/0/0/0/0"}
        wrong = {}
        for name in names:
            try:
                st = os.stat(m / name)
            except OSError as e:
                # below a chunk file the kernel answers ENOTDIR before asking roifs
                ok = (errno.ENOENT, errno.ENOTDIR) if name in too_deep else (errno.ENOENT,)
                if e.errno not in ok:
                    wrong[name[:40]] = errno.errorcode.get(e.errno, e.errno)
                continue
            if name in ("0", "0/0"):
                assert stat.S_ISDIR(st.st_mode), name  # a directory level, not a chunk
                with pytest.raises(IsADirectoryError):
                    read_bytes(m / name)
            else:
                wrong[name[:40]] = "exists"
        assert not wrong, f"expected ENOENT: {wrong}"
        assert m.alive()
        assert m.status()["calls"] == 1


# ---------------------------------------------------------------- metadata never a path


def assert_input_rejected(roifs_bin, task, key, file):
    """check and mount both refuse task's input (exit 2, `roifs: ` naming key and file) and
    mount nothing."""
    for cmd in (["check", task.config], ["mount", task.config, task.mnt]):
        task.mnt.mkdir(exist_ok=True)
        r = run_roifs(roifs_bin, *cmd)
        out = f"exit {r.returncode}\n{r.stderr}"
        assert r.returncode == 2, out
        assert r.stderr.startswith("roifs: ") and key in r.stderr, out
        assert file in r.stderr, out
        assert not is_mounted(task.mnt)


SEPARATORS = ["../", "..", "./", "//", "/..", "\\", "", " ", "\u2215", "-", "_",
              "/etc/passwd", 0, 1.5, True, [], {"a": "/"}]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[repr(s) for s in SEPARATORS])
def test_input_separator_is_not_a_path(tmp_path, roifs_bin, sep):
    task = task_2d(tmp_path)
    zpath = task.input / ".zarray"
    meta = json.loads(zpath.read_text())
    meta["dimension_separator"] = sep
    zpath.write_text(json.dumps(meta))
    assert_input_rejected(roifs_bin, task, "dimension_separator", ".zarray")


V3_KEY_ENCODINGS = [
    {"name": "default", "configuration": {"separator": "../"}},
    {"name": "default", "configuration": {"separator": "/.."}},
    {"name": "v2", "configuration": {"separator": "../"}},
    {"name": "v2", "configuration": {"separator": ""}},
    {"name": "default", "configuration": {"separator": 0}},
    {"name": "../../etc", "configuration": {"separator": "/"}},
    {"name": "default", "configuration": {"separator": "\\"}},
    {"name": "default/../v2", "configuration": {"separator": "/"}},
]


@pytest.mark.parametrize("encoding", V3_KEY_ENCODINGS,
                         ids=[json.dumps(e) for e in V3_KEY_ENCODINGS])
def test_input_v3_key_encoding_is_not_a_path(tmp_path, roifs_bin, encoding):
    """The same for a Zarr v3 input: its chunk_key_encoding never makes a path."""
    task = task_2d(tmp_path)
    shutil.rmtree(task.input)
    task.input.mkdir()
    meta = {"zarr_format": 3, "node_type": "array", "shape": list(SHAPE), "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(CHUNKS)}},
            "chunk_key_encoding": encoding, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}
    (task.input / "zarr.json").write_text(json.dumps(meta))
    assert_input_rejected(roifs_bin, task, "chunk_key_encoding", "zarr.json")
