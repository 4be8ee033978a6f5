"""Remote inputs (docs/remote.md): [input] path an http(s) URL served by nginx started here
(127.0.0.1, no directory listing, a bearer token required, https with a CA made here), each
task compared with the same task over the local copy: mount reads, check, warm, export; Zarr v2,
v3 and sharded v3 arrays; an OME-Zarr image (a level, a channel, a ROI table and a masking ROI
table named through the image's `tables` list, masks from its labels)."""
import json
import os
import re
import shutil
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zarr

from conftest import make_task, mounted, run_roifs, set_option, write_config
from remote_server import FaultProxy, headers_file, nginx

SHAPE, CHUNKS = (64, 96), (16, 32)
ROIS = [((0, 16), (0, 32)), ((8, 40), (20, 70)), ((40, 64), (64, 96)), ((16, 32), (32, 64))]


def remote_twin(tmp_path, local_cfg, url, name, extra_input=None):
    """A copy of task local_cfg whose [input] path is url (headers_file with the token) and
    whose cache is its own."""
    d = tmp_path / name
    d.mkdir()
    shutil.copy(local_cfg.parent / "rois.txt", d / "rois.txt")
    hf = headers_file(d / "headers")
    text = local_cfg.read_text()
    lines = []
    for line in text.splitlines():
        if line.startswith("path") and "in" in line:
            line = f"path = {url}\nheaders_file = {hf}"
            for k, v in (extra_input or {}).items():
                line += f"\n{k} = {v}"
        elif line.startswith("dir"):
            line = f"dir = {d / 'cache'}"
        lines.append(line)
    (d / "task.ini").write_text("\n".join(lines) + "\n")
    return d / "task.ini"


def read_all(mnt):
    return zarr.open(str(mnt / "data.zarr" if (mnt / "data.zarr").exists() else mnt), "r")[...]


def v2_task(tmp_path, rois=ROIS):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 60000, SHAPE).astype("<u2")
    return make_task(tmp_path / "local", data, CHUNKS, rois=rois,
                     process={"builtin": "add", "param.value": 3, "threads": 2},
                     compressor=zarr.Blosc("zstd", 3), regions=[np.s_[:48, :]])


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_v2_array_over_http_is_the_local_task(tmp_path, roifs_bin, tls):
    task = v2_task(tmp_path)
    with nginx(task.dir, tmp_path / "nginx", tls=tls) as base:
        extra = {"ca_file": tmp_path / "nginx" / "ca.pem"} if tls else {}
        cfg = remote_twin(tmp_path, task.config, f"{base}/in.zarr", "remote", extra)
        r = run_roifs(roifs_bin, "check", cfg)
        assert r.returncode == 0, r.stderr
        with mounted(roifs_bin, task.config, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, cfg, tmp_path / "mnt_remote") as mr:
            want = zarr.open(str(ml.path), "r")[...]
            got = zarr.open(str(mr.path), "r")[...]
            np.testing.assert_array_equal(got, want)
            assert (got[:48] != 0).any()
        for name in ("warm", "export"):
            args = [cfg] + ([tmp_path / f"out_{name}.zarr"] if name == "export" else [])
            r = run_roifs(roifs_bin, name, *args, timeout=60)
            assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(zarr.open(str(tmp_path / "out_export.zarr"), "r")[...],
                                      want)


def v3_task(tmp_path, codecs_kind):
    """The v2 task's data as a Zarr v3 array: plain chunks, or shards (index at the end or at
    the start) of 2 x 2 inner chunks, some shards and inner chunks absent."""
    from test_v3 import BYTES_LE, CRC32C, shard_codec, write_v3
    task = v2_task(tmp_path)
    data = task.inp.copy()
    data[:16, :32] = 0  # an inner chunk of fill values: empty in its shard
    shutil.rmtree(task.input)
    if codecs_kind == "plain":
        want = write_v3(task.input, data, CHUNKS, [BYTES_LE, CRC32C], missing={(3, 2)})
    else:
        loc = codecs_kind.split("-")[1]
        want = write_v3(task.input, data, (32, 64), shard_codec(CHUNKS, [BYTES_LE], loc),
                        missing={(1, 1)})
    return task, want


@pytest.mark.parametrize("kind", ["plain", "sharded-end", "sharded-start"])
def test_v3_and_sharded_arrays_over_http(tmp_path, roifs_bin, kind):
    """Sharded: the index by a suffix (or a range) request, each inner chunk by a range; a
    whole shard is never fetched."""
    task, want = v3_task(tmp_path, kind)
    with nginx(task.dir, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/in.zarr", "remote")
        with mounted(roifs_bin, task.config, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, cfg, tmp_path / "mnt_remote") as mr:
            local = zarr.open(str(ml.path), "r")[...]
            got = zarr.open(str(mr.path), "r")[...]
        np.testing.assert_array_equal(got, local)
        assert (got != 0).any()
        if kind != "plain":
            ranged = [r for r in proxy.requests if r[0] == "GET" and "/c/" in r[1]]
            assert ranged and all(r[2] for r in ranged), ranged  # every shard GET has a Range


@pytest.fixture(scope="module")
def ome_root(tmp_path_factory):
    """plate.zarr/B/03/0 of test_ome_input.py (4 levels, channels, ROI tables, a tables list)
    with labels/nuclei (the masking table's region) at level 1's shape."""
    from test_ome_input import level_shape, make_plate, make_tables
    root = tmp_path_factory.mktemp("ome_remote")
    image, data = make_plate(root)
    make_tables(image)
    shape = level_shape(1)
    labels = zarr.open_group(str(image / "labels"), mode="a")
    labels.attrs["labels"] = ["nuclei"]
    nuc = labels.create_group("nuclei")
    nuc.create_dataset("0", data=(np.arange(np.prod(shape)).reshape(shape) % 5).astype("<u2"),
                       chunks=(1, 1, 16, 16), dimension_separator="/")
    nuc.attrs["multiscales"] = [{
        "axes": [{"name": n, "type": t} for n, t in
                 (("c", "channel"), ("z", "space"), ("y", "space"), ("x", "space"))],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 1.0, 0.325, 0.325]}]}], "version": "0.4"}]
    nuc.attrs["image-label"] = {"version": "0.4"}
    return root, image


@pytest.mark.parametrize("table,channel", [("FOV_ROI_table", None), ("nuclei_ROI_table", None),
                                           ("well_ROI_table", None), ("FOV_ROI_table", 1)])
def test_ome_image_over_https_is_the_local_task(ome_root, tmp_path, roifs_bin, table, channel):
    """Level 1 of an OME-Zarr image, its ROI table named bare (found through the tables list,
    for the local image too), a masking table's label image found through its region, a
    channel: mount, check and export equal the local task's."""
    root, image = ome_root
    rel = image.relative_to(root)

    def cfg(d, path, extra):
        d.mkdir()
        return write_config(d / "task.ini", {
            "input": {"path": path, "level": 1, "channel": channel, **extra},
            "rois": {"table": table},
            "process": {"builtin": "add", "param.value": 1, "threads": 2},
            "output": {"chunks": "1,16,16" if channel is not None else "1,1,16,16"},
            "cache": {"dir": d / "cache"}})

    local = cfg(tmp_path / "local", image, {})
    with nginx(root, tmp_path / "nginx", tls=True) as base:
        hf = headers_file(tmp_path / "headers")
        remote = cfg(tmp_path / "remote", f"{base}/{rel}",
                     {"headers_file": hf, "ca_file": tmp_path / "nginx" / "ca.pem"})
        rc, rr = run_roifs(roifs_bin, "check", local), run_roifs(roifs_bin, "check", remote)
        assert rc.returncode == 0 and rr.returncode == 0, rc.stderr + rr.stderr
        assert "rois:      4\n" in rr.stdout and "rois:      4\n" in rc.stdout
        with mounted(roifs_bin, local, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, remote, tmp_path / "mnt_remote") as mr:
            want = zarr.open(str(ml.path), "r")[...]
            got = zarr.open(str(mr.path), "r")[...]
        np.testing.assert_array_equal(got, want)
        assert (got != 0).any()
        r = run_roifs(roifs_bin, "export", remote, tmp_path / "out.zarr", timeout=60)
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(zarr.open(str(tmp_path / "out.zarr"), "r")[...], want)
        log = (tmp_path / "nginx" / "access.log").read_text()
        assert "GET /plate.zarr/B/03/0/tables/ HTTP" not in log  # never a listing
        assert "HTTP/2.0\"" in log and "HTTP/1.1\"" not in log  # HTTP/2: the server offers it


def label_files(image):
    """labels/seg of an image: each file's bytes (metadata without the provenance, which names
    the input)."""
    out = {}
    for p in sorted((image / "labels" / "seg").rglob("*")):
        if p.is_file():
            rel = p.relative_to(image).as_posix()
            out[rel] = p.read_bytes()
            if p.name in (".zattrs", "zarr.json"):
                doc = json.loads(out[rel])
                doc.pop("roifs", None)
                out[rel] = doc
    return out


def labels_config(d, path, extra):
    """An `ome = labels` task (the builtin add over level 1's FOV ROIs) in the new directory d,
    over path (a local image or its URL), extra keys added to [input]."""
    d.mkdir()
    return write_config(d / "task.ini", {
        "input": {"path": path, "level": 1, "channel": 0, **extra},
        "rois": {"table": "FOV_ROI_table"},
        "process": {"builtin": "add", "param.value": 1, "threads": 2},
        "output": {"ome": "labels", "dtype": "<u4", "label_name": "seg"},
        "cache": {"dir": d / "cache"}})


def test_ome_labels_of_a_remote_image(ome_root, tmp_path, roifs_bin):
    """`ome = labels` needs no listing to make the label image (the image's metadata, its
    levels' arrays and labels/.zattrs are named by metadata): `warm` and `export --into` a
    local copy of the image's group metadata alone give the label image the local task gives;
    `check` refuses nothing (the mount and `serve` derive the image's own files from its
    metadata: test_remote_overlay.py); `clean` takes it."""
    root, image = ome_root
    rel = image.relative_to(root)
    cfg = labels_config
    local = cfg(tmp_path / "local", image, {})
    into_local = tmp_path / "into_local"
    shutil.copytree(image, into_local)
    r = run_roifs(roifs_bin, "export", "--into", into_local, local, timeout=60)
    assert r.returncode == 0, r.stderr
    want = label_files(into_local)
    assert len(want) > 4
    into_remote = tmp_path / "into_remote"  # the image's group metadata, no array
    into_remote.mkdir()
    for name in (".zgroup", ".zattrs"):
        shutil.copy(image / name, into_remote / name)
    with nginx(root, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        remote = cfg(tmp_path / "remote", f"{proxy.url}/{rel}",
                     {"headers_file": headers_file(tmp_path / "headers")})
        r = run_roifs(roifs_bin, "check", remote)
        assert r.returncode == 0 and "refused" not in r.stdout, r.stdout + r.stderr
        taken = tmp_path / "taken.ini"  # a label of the image's own name: found by its metadata
        taken.write_text(remote.read_text().replace("label_name = seg", "label_name = nuclei"))
        r = run_roifs(roifs_bin, "check", taken)
        assert r.returncode == 2 and "already has a label 'nuclei'" in r.stderr, r.stderr
        r = run_roifs(roifs_bin, "warm", remote, timeout=60)
        assert r.returncode == 0, r.stderr
        r = run_roifs(roifs_bin, "export", "--into", into_remote, remote, timeout=60)
        assert r.returncode == 0, r.stderr
        r = run_roifs(roifs_bin, "clean", remote, timeout=30)
        assert r.returncode == 0, r.stderr
        paths = [p for _, p, _ in proxy.requests]
    assert label_files(into_remote) == want
    assert paths and not [p for p in paths if p.endswith("/")], paths  # never a listing
    assert json.loads((into_remote / "labels" / ".zattrs").read_text())["labels"] == ["seg"]


# ---------------------------------------------------------------- faults (FaultProxy)


def chunk_bytes(mnt, key):
    with open(mnt / key, "rb") as f:
        return f.read()


@pytest.mark.parametrize("fault", ["500", "503", "reset", "short", "delay:3"])
def test_transient_faults_are_retried_and_the_result_is_exact(tmp_path, roifs_bin, fault):
    """A 5xx, a reset, a body shorter than announced or a request over request_timeout is
    tried again (the proxy counts the attempts); the partial body is never decoded: the
    result equals the local task's."""
    task = v2_task(tmp_path)
    with nginx(task.dir, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/in.zarr", "remote",
                          {"retries": 2, "request_timeout": 1})
        proxy.schedule(r"/in\.zarr/1\.1$", fault, fault, method="GET")
        with mounted(roifs_bin, task.config, tmp_path / "mnt_local") as ml, \
                mounted(roifs_bin, cfg, tmp_path / "mnt_remote") as mr:
            want = zarr.open(str(ml.path), "r")[...]
            got = zarr.open(str(mr.path), "r")[...]
            st = mr.status()
        np.testing.assert_array_equal(got, want)
        assert st["rois"]["failed"] == 0
        # (curl itself may try a reset on a reused connection again)
        assert st["remote"]["retried"] >= 1 or fault == "reset", st["remote"]
        assert proxy.count(r"/in\.zarr/1\.1$", "GET") >= 3  # two faults, then the answer


def test_refusal_fails_the_roi_loudly_and_a_later_read_tries_again(tmp_path, roifs_bin):
    """A 403 for a chunk fails the ROIs that read it (EIO; the log and the status name the URL
    and the status, never the token), retries exhausted on 5xx too; every other chunk is
    served; once the server answers again, a later read computes it."""
    one_chunk_rois = [((0, 16), (0, 32)), ((16, 32), (32, 64)), ((32, 48), (64, 96))]
    task = v2_task(tmp_path, one_chunk_rois)
    with nginx(task.dir, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/in.zarr", "remote",
                          {"retries": 1})
        with mounted(roifs_bin, task.config, tmp_path / "mnt_local") as ml:
            want = {k: chunk_bytes(ml.path, k) for k in ("0.0", "1.1", "2.2")}
        proxy.schedule(r"/in\.zarr/0\.0$", *["403"] * 100, method="GET")
        proxy.schedule(r"/in\.zarr/1\.1$", *["502"] * 100, method="GET")
        with mounted(roifs_bin, cfg, tmp_path / "mnt_remote") as mr:
            for key in ("0.0", "1.1"):
                with pytest.raises(OSError) as ei:
                    chunk_bytes(mr.path, key)
                assert ei.value.errno == 5, key
            st = mr.status()
            msgs = " ".join(e["message"] for e in st["errors"])
            assert "/in.zarr/0.0: HTTP 403" in msgs, msgs
            assert "after 2 attempts" in msgs and "/in.zarr/1.1: HTTP 502" in msgs, msgs
            assert chunk_bytes(mr.path, "2.2") == want["2.2"]  # the rest is served
            # the server answers again: a later read tries again
            proxy.clear()
            assert chunk_bytes(mr.path, "0.0") == want["0.0"]
            assert chunk_bytes(mr.path, "1.1") == want["1.1"]
            log = mr.log_text()
        for text in (log, json.dumps(st), (tmp_path / "remote" / "task.ini").read_text()):
            assert "s3cr3t" not in text


def test_metadata_missing_or_refused_fails_check_with_url_and_status(tmp_path, roifs_bin):
    task = v2_task(tmp_path)
    with nginx(task.dir, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/nothing.zarr", "remote")
        r = run_roifs(roifs_bin, "check", cfg)
        assert r.returncode == 2 and "/nothing.zarr: " in r.stderr and "HTTP 404" in r.stderr, \
            r.stderr
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/in.zarr", "remote2")
        proxy.schedule(r"\.zarray$", *["401"] * 10)
        r = run_roifs(roifs_bin, "check", cfg)
        assert r.returncode == 2 and "/in.zarr/.zarray: HTTP 401" in r.stderr, r.stderr
        assert "s3cr3t" not in r.stderr + r.stdout


def test_headers_file_readable_by_others_is_refused_and_never_shown(tmp_path, roifs_bin):
    task = v2_task(tmp_path)
    with nginx(task.dir, tmp_path / "nginx") as base:
        cfg = remote_twin(tmp_path, task.config, f"{base}/in.zarr", "remote")
        os.chmod(tmp_path / "remote" / "headers", 0o644)
        r = run_roifs(roifs_bin, "check", cfg)
        assert r.returncode == 2, r.stderr
        assert "headers_file" in r.stderr and "chmod 600" in r.stderr, r.stderr
        assert "s3cr3t" not in r.stderr + r.stdout
        # without the token: the server's 401, not the token, in the message
        os.chmod(tmp_path / "remote" / "headers", 0o600)
        (tmp_path / "remote" / "headers").write_text("Authorization: Bearer s3cr3t-wrong\n")
        r = run_roifs(roifs_bin, "check", cfg)
        assert r.returncode == 2 and "HTTP 401" in r.stderr, r.stderr
        assert "s3cr3t" not in r.stderr + r.stdout
        # the token is not on any command line: the mount's /proc/PID/cmdline
        headers_file(tmp_path / "remote" / "headers")
        with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
            zarr.open(str(m.path), "r")[...]
            cmdline = open(f"/proc/{m.proc.pid}/cmdline", "rb").read()
            attrs = (m.path / ".zattrs").read_text()
            status = json.dumps(m.status())
        assert b"s3cr3t" not in cmdline
        assert "s3cr3t" not in attrs + status + m.log_text()


def test_https_certificate_is_verified(tmp_path, roifs_bin):
    """Without ca_file the test's CA is not trusted: the mount is refused."""
    task = v2_task(tmp_path)
    with nginx(task.dir, tmp_path / "nginx", tls=True) as base:
        cfg = remote_twin(tmp_path, task.config, f"{base}/in.zarr", "remote", {"retries": 0})
        r = run_roifs(roifs_bin, "check", cfg)
        assert r.returncode == 2, r.stderr
        assert "certificate" in r.stderr.lower() or "SSL" in r.stderr, r.stderr


# ---------------------------------------------------------------- freshness


def rewrite_chunk(task, idx, value):
    """Writes input chunk idx of the local copy (served by nginx) with a new value and a new
    mtime (nginx's ETag is its mtime in seconds and its size)."""
    z = zarr.open(str(task.input), "r+")
    sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, CHUNKS))
    z[sl] = value
    path = task.input / ".".join(map(str, idx))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))


def test_rewritten_chunk_is_seen_after_revalidate_and_only_its_rois_recompute(tmp_path,
                                                                            roifs_bin):
    one_chunk_rois = [((0, 16), (0, 32)), ((16, 32), (32, 64)), ((32, 48), (64, 96))]
    task = v2_task(tmp_path, one_chunk_rois)
    with nginx(task.dir, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/in.zarr", "remote",
                          {"revalidate": 1})
        with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
            before = zarr.open(str(m.path), "r")[...]
            computed = m.status()["results"]["computed"]
            assert computed == 3
            rewrite_chunk(task, (1, 1), 7)
            time.sleep(1.3)
            after = zarr.open(str(m.path), "r")[...]
            st = m.status()
        assert (after[16:32, 32:64] == 10).all()  # add 3
        np.testing.assert_array_equal(after[:16], before[:16])
        np.testing.assert_array_equal(after[32:], before[32:])
        assert st["results"]["computed"] == computed + 1, st["results"]
        assert proxy.conditional, "revalidation is a conditional request"


def test_unreachable_server_serves_last_confirmed_results(tmp_path, roifs_bin):
    task = v2_task(tmp_path)
    with nginx(task.dir, tmp_path / "nginx") as base, FaultProxy(base) as proxy:
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/in.zarr", "remote",
                          {"revalidate": 1, "retries": 0})
        with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
            before = zarr.open(str(m.path), "r")[...]
            proxy.schedule(r".", *["reset"] * 1000)
            time.sleep(1.3)
            after = zarr.open(str(m.path), "r")[...]
            st = m.status()
        np.testing.assert_array_equal(after, before)
        assert st["remote"]["unconfirmed"] > 0, st["remote"]
        assert st["rois"]["failed"] == 0


def test_cold_read_asks_for_each_chunk_once(tmp_path, roifs_bin):
    """Overlapping ROIs computed by several threads over one connection: each input chunk is
    asked for once (threads wanting it wait for the look in flight, whose GET's bytes are kept
    for the read; requests counted per object by the proxy), all over one kept-alive
    connection."""
    task = v2_task(tmp_path)
    set_option(task, "threads", 4)
    with nginx(task.dir, tmp_path / "nginx") as base, \
            FaultProxy(base, latency=0.01) as proxy:
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/in.zarr", "remote",
                          {"connections": 1})
        with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
            zarr.open(str(m.path), "r")[...]
        per_key = {}
        for method, path, _ in proxy.requests:
            if re.search(r"/in\.zarr/\d+\.\d+$", path):
                per_key.setdefault(path, Counter())[method] += 1
        assert per_key
        bad = {k: c for k, c in per_key.items() if c["HEAD"] + c["GET"] > 1}
        assert not bad, bad
        # one connection, kept alive: every request of the mount over it
        assert proxy.connections == 1, (proxy.connections, len(proxy.requests))
        # a remount on the warm cache asks for signatures only, no chunk's bytes
        proxy.requests.clear()
        with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
            zarr.open(str(m.path), "r")[...]
            assert m.status()["results"]["computed"] == 0
        chunks = [(mth, p) for mth, p, _ in proxy.requests
                  if re.search(r"/in\.zarr/\d+\.\d+$", p)]
        fetched = [p for mth, p in chunks  # a GET only of a missing chunk: a 404, no body
                   if mth == "GET" and (task.input / p.rsplit("/", 1)[1]).exists()]
        assert chunks and not fetched, fetched
        assert len(chunks) == len(set(chunks)), chunks


def test_apply_and_watch_refuse_a_remote_input(tmp_path, roifs_bin):
    """A remote input is read-only and revalidated: `roifs apply` and `[input] watch` are
    refused with exit 2, naming why."""
    task = v2_task(tmp_path)
    with nginx(task.dir, tmp_path / "nginx") as base:
        cfg = remote_twin(tmp_path, task.config, f"{base}/in.zarr", "remote")
        r = run_roifs(roifs_bin, "apply", cfg)
        assert r.returncode == 2 and "remote input, read-only" in r.stderr, r.stderr
        cfg.write_text(cfg.read_text().replace("[input]\n", "[input]\nwatch = true\n"))
        r = run_roifs(roifs_bin, "check", cfg)
        assert r.returncode == 2 and "revalidated instead" in r.stderr, r.stderr


def test_requests_in_flight_are_at_most_connections(tmp_path, roifs_bin):
    """connections = 2, 12 one-chunk ROIs, 8 compute threads, 8 parallel readers and 50 ms
    per request: requests overlap, two at a time, never more (the proxy's most requests being
    answered at once), over at most two kept-alive connections."""
    grid = [((i * 16, i * 16 + 16), (j * 32, j * 32 + 32)) for i in range(4) for j in range(3)]
    task = v2_task(tmp_path, grid)
    set_option(task, "threads", 8)
    with nginx(task.dir, tmp_path / "nginx") as base, \
            FaultProxy(base, latency=0.05) as proxy:
        cfg = remote_twin(tmp_path, task.config, f"{proxy.url}/in.zarr", "remote",
                          {"connections": 2})
        with mounted(roifs_bin, cfg, tmp_path / "mnt") as m:
            keys = [f"{i}.{j}" for i in range(4) for j in range(3)]
            with ThreadPoolExecutor(8) as ex:
                list(ex.map(lambda k: chunk_bytes(m.path, k), keys))
        assert proxy.max_in_flight == 2, proxy.max_in_flight
        assert proxy.connections <= 2, proxy.connections
