"""The size of a chunk before its first open (docs/mounted-tree.md#size-contract):
with a compressor, a chunk not computed yet shows an upper bound of its encoded size (attribute
timeout 0, no blocks) and its exact size from the open on, so no reader that trusts the size
it saw before opening can copy a short or empty chunk as if it were whole. Each reader of the
matrix below runs on a cold mount ("before": nothing computed) and again once every chunk has
been opened ("after"), and must give the exact bytes or fail loudly, as the matrix says; stat,
ls -l and readdir compute nothing."""
import contextlib
import json
import mmap
import os
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import PY, all_chunks, chunk_key, make_task, read_bytes

SHAPE, CHUNKS = (40, 48), (16, 16)  # 3 x 3 chunks, edge chunks in both dimensions
ROIS = [((0, 40), (0, 48))]
KEYS = [chunk_key(i) for i in all_chunks(SHAPE, CHUNKS)]

EXACT, FAILS = "exact", "fails loudly"
# reader: (before the first open, after it)
MATRIX = {
    "GNU tar": (EXACT, EXACT),  # opens every non-empty file, then re-stats it (fstat)
    "Python tarfile": (FAILS, EXACT),  # copies the pre-open st_size bytes: "unexpected end of data"
    "zip (Info-ZIP)": (EXACT, EXACT),
    "rsync": (EXACT, EXACT),
    "python3 -m http.server": (EXACT, EXACT),  # Content-Length from fstat after open
    "nginx": (EXACT, EXACT),
    "wc -c": (EXACT, EXACT),
    "tensorstore-style (open, fstat, pread st_size)": (EXACT, EXACT),
    "mmap": (EXACT, EXACT),
    "zarr-python": (EXACT, EXACT),
    "dask": (EXACT, EXACT),
}


def cold_task(tmp_path, output=None):
    data = (np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE) % 7).astype("<u2")
    task = make_task(tmp_path, data, CHUNKS, rois=ROIS,
                     process={"builtin": "add", "param.value": 1, "threads": 2,
                              "readahead": 0},
                     output=output or {"compressor": "blosc"})
    task.want = data + 1
    return task


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        time.sleep(0.05)
    return False


def fetch_all(port):
    """Every chunk over HTTP; a Content-Length that disagrees with the body is a failure."""
    out = {}
    for key in KEYS:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{key}", timeout=20) as r:
            body = r.read()
            length = int(r.headers["Content-Length"])
            if length != len(body):
                raise OSError(f"{key}: Content-Length {length}, body {len(body)} bytes")
            out[key] = body
    return out


@contextlib.contextmanager
def server(cmd, port, what):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not wait_port(port, proc):
            err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None else ""
            pytest.fail(f"{what} did not start: {err}")
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


STATUS = ".roifs/status"


def files_of(root, status=True):
    """The chunks (and the status file, for archivers) as extracted under root."""
    out = {key: (Path(root) / key).read_bytes() for key in KEYS}
    if status:
        out[STATUS] = (Path(root) / STATUS).read_bytes()
    return out


def run_ok(cmd, **kw):
    """Runs cmd; a non-zero exit is a loud failure (raised)."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)
    if r.returncode != 0:
        raise OSError(f"{cmd[0]} exit status {r.returncode}: {r.stderr.strip()[-300:]}")
    return r


def read_gnu_tar(mnt, work):
    out = work / "x"
    out.mkdir()
    run_ok(["tar", "cf", str(work / "a.tar"), "-C", str(mnt), "."])
    run_ok(["tar", "xf", str(work / "a.tar"), "-C", str(out)])
    return files_of(out)


def read_tarfile(mnt, work):
    with tarfile.open(work / "a.tar", "w") as t:
        t.add(str(mnt), arcname=".")
    with tarfile.open(work / "a.tar") as t:
        t.extractall(work / "x")
    return files_of(work / "x")


def read_zip(mnt, work):
    run_ok(["zip", "-qr", str(work / "a.zip"), "."], cwd=mnt)
    run_ok(["unzip", "-q", str(work / "a.zip"), "-d", str(work / "x")])
    return files_of(work / "x")


def read_rsync(mnt, work):
    run_ok(["rsync", "-a", f"{mnt}/", f"{work / 'x'}/"])
    return files_of(work / "x")


def read_http_server(mnt, work):
    port = free_port()
    cmd = [PY, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(mnt), str(port)]
    with server(cmd, port, "python3 -m http.server"):
        return fetch_all(port)


NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {mnt};
        location / {{ }}
    }}
}}
"""


def read_nginx(mnt, work):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        pytest.fail("nginx is not installed (scripts/install-deps.sh installs it)")
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(NGINX_CONF.format(work=work, port=port, mnt=mnt))
    # master_process off: one process, as root, which may read the mount (no allow_other)
    with server([nginx, "-p", str(work), "-e", str(work / "error.log"), "-c", str(conf)],
                port, "nginx"):
        return fetch_all(port)


def read_wc(mnt, work):
    out = {}
    for key in KEYS:
        n = int(run_ok(["wc", "-c", str(mnt / key)]).stdout.split()[0])
        out[key] = read_bytes(mnt / key) if n == len(read_bytes(mnt / key)) else b"?" * n
    return out


def read_tensorstore_style(mnt, work):
    """As tensorstore's file kvstore reads a value: open, fstat the fd, then pread exactly
    st_size bytes; a short read is an error ("Length changed while reading")."""
    out = {}
    for key in KEYS:
        fd = os.open(mnt / key, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            buf = b""
            while len(buf) < size:
                got = os.pread(fd, size - len(buf), len(buf))
                if not got:
                    raise OSError(f"{key}: Length changed while reading")
                buf += got
            out[key] = buf
        finally:
            os.close(fd)
    return out


def read_mmap(mnt, work):
    out = {}
    for key in KEYS:
        with open(mnt / key, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            out[key] = mm[:]
    return out


def read_zarr(mnt, work):
    return zarr.open(str(mnt), mode="r")[:]


def read_dask(mnt, work):
    import dask.array as da
    return da.from_zarr(str(mnt)).compute(scheduler="threads")


READERS = {
    "GNU tar": read_gnu_tar,
    "Python tarfile": read_tarfile,
    "zip (Info-ZIP)": read_zip,
    "rsync": read_rsync,
    "python3 -m http.server": read_http_server,
    "nginx": read_nginx,
    "wc -c": read_wc,
    "tensorstore-style (open, fstat, pread st_size)": read_tensorstore_style,
    "mmap": read_mmap,
    "zarr-python": read_zarr,
    "dask": read_dask,
}


def run_reader(reader, mnt, work):
    """(what the reader got, None) or (None, the loud failure: an exception, a non-zero exit)."""
    work.mkdir()
    try:
        return READERS[reader](mnt, work), None
    except Exception as e:
        return None, repr(e)


def verdict(got, truth):
    if got is None:
        return FAILS
    if isinstance(got, np.ndarray):
        return EXACT if np.array_equal(got, truth["array"]) else "SILENTLY WRONG ARRAY"
    wrong = [k for k in KEYS if got[k] != truth[k]]
    if STATUS in got:  # an archive of the status file: a whole document, never empty
        with contextlib.suppress(ValueError):
            if json.loads(got[STATUS])["rois"]["total"] == len(ROIS):
                return EXACT if not wrong else f"SILENTLY WRONG {wrong}"
        wrong.append(STATUS)
    return EXACT if not wrong else f"SILENTLY WRONG {wrong}"


@pytest.mark.parametrize("reader", list(MATRIX))
def test_reader_before_and_after_first_open(tmp_path, mount, reader):
    task = cold_task(tmp_path)
    with mount(task.config) as m:
        st = m.status()
        assert st["chunks"]["cached"] == 0 and st["calls"] == 0  # cold
        cold, why = run_reader(reader, m.path, tmp_path / "before")
        # The truth, read afterwards: what a plain open gives, itself checked against numpy.
        truth = {k: read_bytes(m / k) for k in KEYS}
        truth["array"] = task.want
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], task.want)
        warm, why2 = run_reader(reader, m.path, tmp_path / "after")
    assert (verdict(cold, truth), verdict(warm, truth)) == MATRIX[reader], (why, why2)


def du(paths, *opts):
    r = subprocess.run(["du", "-c", "-B1", *opts, *map(str, paths)], capture_output=True,
                       text=True, check=True, timeout=30)
    return int(r.stdout.splitlines()[-1].split()[0])  # the total


def test_stat_ls_readdir_compute_nothing(tmp_path, mount):
    """stat, ls -lR, readdir and du compute nothing. du: nothing is stored yet (0 blocks)
    and the apparent size is the bound; both exact once the chunks are computed."""
    task = cold_task(tmp_path)
    with mount(task.config) as m:
        names = sorted(os.listdir(m.path))
        assert names == sorted(KEYS + [".roifs", ".zarray", ".zattrs"])
        subprocess.run(["ls", "-lR", str(m.path)], check=True, capture_output=True, timeout=30)
        sizes = {k: os.stat(m / k) for k in KEYS}
        files = [m / k for k in KEYS]
        apparent, used = du(files, "--apparent-size"), du(files)
        st = m.status()
        assert st["calls"] == 0 and st["chunks"]["cached"] == 0, st
        exact = {k: len(read_bytes(m / k)) for k in KEYS}
        for k in KEYS:  # an upper bound before the open, nothing stored yet
            assert sizes[k].st_size >= exact[k] and sizes[k].st_blocks == 0, (k, sizes[k])
            after = os.stat(m / k)
            assert after.st_size == exact[k] and after.st_blocks == -(-exact[k] // 512)
        assert used == 0 and apparent == sum(s.st_size for s in sizes.values())
        assert du(files, "--apparent-size") == sum(exact.values())
        assert du(files) == sum(-(-n // 512) * 512 for n in exact.values())


@pytest.mark.parametrize("output", [
    {"compressor": "blosc"}, {"compressor": "blosc", "cname": "zstd", "clevel": 9},
    {"compressor": "zstd"}, {"compressor": "gzip"}, {"compressor": "zlib", "clevel": 1},
    {"format": 3, "compressor": "zstd"},
    {"format": 3, "compressor": "blosc", "chunks": "8,8", "shard": "16,16"},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_bound_holds_for_every_encoding(tmp_path, mount, output):
    """Incompressible data: the encoded chunk is as large as it gets, and never larger than
    the size shown before the open."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 65535, SHAPE, dtype="<u2")
    task = make_task(tmp_path, data, CHUNKS, rois=ROIS,
                     process={"builtin": "copy", "threads": 2, "readahead": 0}, output=output)
    with mount(task.config) as m:
        v3 = output.get("format") == 3
        keys = [("c/" + k.replace(".", "/")) if v3 else k for k in KEYS]
        before = {k: os.stat(m / k).st_size for k in keys}
        for k in keys:
            n = len(read_bytes(m / k))
            assert 0 < n <= before[k], (k, n, before[k])
            assert os.stat(m / k).st_size == n


def test_status_is_never_archived_empty(tmp_path, mount):
    task = cold_task(tmp_path)
    with mount(task.config) as m:
        path = m / ".roifs" / "status"
        assert os.stat(path).st_size > 0
        with open(path, "rb") as f:  # what stat shows an opener is its own snapshot
            assert os.fstat(f.fileno()).st_size == len(f.read())
        read_bytes(m / "0.0")  # the document changes (and grows: errors would)
        out = tmp_path / "x"
        out.mkdir()
        subprocess.run(["tar", "cf", str(tmp_path / "s.tar"), "-C", str(m.path), ".roifs"],
                       check=True, timeout=30)
        subprocess.run(["tar", "xf", str(tmp_path / "s.tar"), "-C", str(out)], check=True)
        doc = json.loads((out / ".roifs" / "status").read_bytes())
        assert doc["chunks"]["cached"] >= 1


def test_status_read_after_stat_is_the_size_stat_showed(tmp_path, mount):
    """A reader that stats the status file, opens it and copies the size it saw (Python's
    tarfile) gets exactly that many bytes and a whole document, also when the document grew
    between the stat and the open (here: the GETATTR count gains digits); and what it reads is
    the document as it is at the open, not as it was at the stat. Before the fix, the open
    served a fresh document of another length: tarfile's "unexpected end of data"."""
    import threading
    task = cold_task(tmp_path)
    with mount(task.config) as m:
        path = m / ".roifs" / "status"
        seen = os.stat(path).st_size
        # From another thread (another pid for FUSE): 1000 GETATTRs, so the document's
        # "GETATTR" count has more digits at the open than at the stat.
        t = threading.Thread(target=lambda: [os.stat(path) for _ in range(1000)])
        t.start()
        t.join()
        read_bytes(m / "0.0")  # and the document changes: a chunk is made
        with open(path, "rb") as f:
            data = f.read()
        assert len(data) == seen
        doc = json.loads(data)
        assert doc["fuse"]["requests"]["GETATTR"] >= 1000  # as at the open
        assert doc["chunks"]["cached"] >= 1
        with tarfile.open(tmp_path / "s.tar", "w") as tar:  # the archiver's own way
            tar.add(path, arcname="status")
        with tarfile.open(tmp_path / "s.tar") as tar:
            json.loads(tar.extractfile("status").read())


def test_bound_of_every_pyramid_level(tmp_path, mount):
    """ome = true: each level's chunks show their own level's bound before the open."""
    task = cold_task(tmp_path, output={"compressor": "zstd", "ome": "true", "levels": 3})
    with mount(task.config) as m:
        for level in range(3):
            keys = sorted(n for n in os.listdir(m / str(level)) if not n.startswith("."))
            assert keys
            before = {k: os.stat(m / str(level) / k) for k in keys}
            for k in keys:
                n = len(read_bytes(m / str(level) / k))
                assert 0 < n <= before[k].st_size and before[k].st_blocks == 0, (level, k)
