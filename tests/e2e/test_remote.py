"""Remote inputs (docs/remote.md): [input] path an http(s) URL served by nginx started here
(127.0.0.1, no directory listing, a bearer token required, https with a CA made here), each
task compared with the same task over the local copy: mount reads, check, warm, export; Zarr v2,
v3 and sharded v3 arrays; an OME-Zarr image (a level, a channel, a ROI table and a masking ROI
table named through the image's `tables` list, masks from its labels)."""
import json
import os
import shutil

import numpy as np
import pytest
import zarr

from conftest import make_task, mounted, run_roifs, write_config
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


def v2_task(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 60000, SHAPE).astype("<u2")
    return make_task(tmp_path / "local", data, CHUNKS, rois=ROIS,
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
