"""A hostile cache directory (issue 14 item 6): the cache is used only when it and its
subdirectories belong to the user running roifs and nobody else may write there (otherwise
exit 2 with the reason, from check, warm, mount and export); entries are opened without
following symbolic links, and an entry
that is a link (or not a regular file) is never served; the [mount] log is created 0600
whatever the umask."""
import errno
import os
import shutil
import stat

import numpy as np
import pytest

from conftest import is_mounted, make_task, read_bytes, run_roifs, world_dir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

NOBODY = 65534
SHAPE, CHUNKS = (8, 8), (4, 4)
ROIS = [((0, 4), (0, 4)), ((4, 8), (4, 8))]


def task_of(tmp_path, cache=None):
    data = np.arange(64, dtype="<u2").reshape(SHAPE)
    sections = {"cache": {"dir": str(cache)}} if cache else None
    task = make_task(tmp_path, data, CHUNKS, rois=ROIS,
                     process={"builtin": "add", "param.value": 1, "readahead": 0},
                     output={"compressor": "none"}, sections=sections)
    return task, data + 1


def as_nobody(fn):
    """fn() in a forked child as user nobody; returns (errno or 0, the bytes fn returned)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(w, fn())
        except OSError as e:
            code = e.errno
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), got


def refused(roifs_bin, task, reason):
    for args in (["check", task.config], ["warm", task.config],
                 ["mount", task.config, task.dir / "mnt"], ["export", task.config, task.dir / "out"]):
        (task.dir / "mnt").mkdir(exist_ok=True)
        r = run_roifs(roifs_bin, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert reason in r.stderr, (args, r.stderr)
        assert not is_mounted(task.dir / "mnt")


def test_directory_of_another_user(tmp_path, roifs_bin):
    """User nobody made the cache directory (0777, with subdirectories and a bogus manifest)
    before root used it."""
    cache = tmp_path / "cache"
    for sub in ("", "chunks", "rois", "locks"):
        (cache / sub).mkdir(exist_ok=True)
        os.chmod(cache / sub, 0o777)
        os.chown(cache / sub, NOBODY, NOBODY)
    (cache / "manifest").write_text("roifs-cache 1\nbogus\n")
    os.chown(cache / "manifest", NOBODY, NOBODY)
    task, _ = task_of(tmp_path, cache)
    refused(roifs_bin, task,
            f"roifs: {cache}: owned by uid {NOBODY}, not by you (uid 0); refusing to use it")
    assert (cache / "manifest").read_text() == "roifs-cache 1\nbogus\n"  # left as it was


@pytest.mark.parametrize("mode,who", [(0o777, "others"), (0o770, "its group"),
                                      (0o722, "others")])
def test_directory_writable_by_others(tmp_path, roifs_bin, mode, who):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, mode)
    task, _ = task_of(tmp_path, cache)
    refused(roifs_bin, task,
            f"roifs: {cache}: is writable by {who} (mode {mode:04o}); refusing to use it")


@pytest.mark.parametrize("damage", ["writable chunks", "linked results", "foreign users"])
def test_untrusted_subdirectory(tmp_path, roifs_bin, damage):
    task, _ = task_of(tmp_path)
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    if damage == "writable chunks":
        os.chmod(task.cache / "chunks", 0o757)
        reason = f"{task.cache}/chunks: is writable by others (mode 0757)"
    elif damage == "linked results":
        shutil.move(task.cache / "results", tmp_path / "elsewhere")
        os.symlink(tmp_path / "elsewhere", task.cache / "results")
        reason = f"{task.cache}/results: is a symbolic link or not a directory"
    else:
        os.chown(task.cache / "users", NOBODY, NOBODY)
        reason = f"{task.cache}/users: owned by uid {NOBODY}, not by you (uid 0)"
    refused(roifs_bin, task, reason)


def test_symlinked_chunk_is_never_served(tmp_path, mount, roifs_bin):
    """root's cached chunk replaced by a link to a root-only file: with allow_other, user
    nobody must get the computed chunk, never that file's bytes."""
    with world_dir("roifs-hostile-") as d:
        task, want = task_of(d)
        assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
        secret = d / "secret"
        secret.write_bytes(b"TOP SECRET, ROOT ONLY: 32 bytes!")
        os.chmod(secret, 0o600)
        chunk = task.cache / "chunks" / "0"
        chunk.unlink()
        os.symlink(secret, chunk)
        with mount(task.config, mnt=d / "mnt", args=("-o", "allow_other")) as m:
            err, got = as_nobody(lambda: read_bytes(m.path / "0.0"))
            assert err == 0, f"user nobody got errno {err}"
            assert b"SECRET" not in got
            assert np.array_equal(np.frombuffer(got, "<u2").reshape(4, 4), want[0:4, 0:4])
            assert read_bytes(m.path / "0.0") == want[0:4, 0:4].tobytes()
            assert "is a symbolic link; computing it again" in m.log_text()
        assert not chunk.is_symlink()
        assert secret.read_bytes() == b"TOP SECRET, ROOT ONLY: 32 bytes!"


def test_symlinked_result_pack_is_never_read(tmp_path, mount, roifs_bin):
    task, want = task_of(tmp_path)
    assert run_roifs(roifs_bin, "warm", task.config).returncode == 0
    packs = sorted((task.cache / "results").glob("pack-*"))
    assert packs
    for p in packs:  # a link to a copy of itself: same bytes, still not ours
        copy = tmp_path / p.name
        shutil.copy(p, copy)
        p.unlink()
        os.symlink(copy, p)
    for f in (task.cache / "chunks").iterdir():
        f.unlink()
    with mount(task.config) as m:
        got = np.stack([np.frombuffer(read_bytes(m / k), "<u2").reshape(4, 4)
                        for k in ("0.0", "1.1")])
        assert np.array_equal(got[0], want[0:4, 0:4]) and np.array_equal(got[1], want[4:8, 4:8])
        assert m.status()["calls"] == 2  # nothing taken from the linked packs
        assert "not a regular file" in m.log_text()


def test_log_file_is_private_whatever_the_umask(tmp_path, mount):
    task, _ = task_of(tmp_path)
    log = tmp_path / "roifs.log"
    task.config.write_text(task.config.read_text() + f"\n[mount]\nlog = {log}\n")
    old = os.umask(0)
    try:
        with mount(task.config) as m:
            read_bytes(m / "0.0")
    finally:
        os.umask(old)
    assert log.exists() and "mounted" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600, oct(log.stat().st_mode)
