"""roifs apply (SPEC §13): the result written into the input array itself. Every ROI from the
ORIGINAL input, exactly once, against a numpy reference (overlapping ROIs with a halo and a
Gaussian, so that a ROI reading an already replaced chunk would show); kills with SIGKILL at
every step of a replacement (the testing-only hook ROIFS_TEST_APPLY_KILL=POINT:N) and at
random moments, then completion equal to one application; a reader decoding input chunks
while apply replaces them (each old or new, never torn); v2, v3 and sharded v3; the rerun
that changes nothing, --again, a concurrent apply refused, and the refusals (exit 2)."""
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from scipy import ndimage

from conftest import PY, make_task, run_on_terminal, run_roifs
from mounting import write_config

SIGMA = 1.5
HALO = 4
SHAPE = (96, 96)
CHUNKS = (16, 16)
# Overlapping boxes (later wins), some across chunk borders, one covering much of the array.
ROIS = [((0, 40), (0, 40)), ((20, 60), (20, 60)), ((50, 96), (0, 96)), ((0, 50), (40, 96)),
        ((30, 70), (30, 70)), ((5, 15), (70, 90))]

BLUR_PY = '''
import os, time
import numpy as np
from scipy import ndimage

def blur(block, roi):
    p = roi.params
    with open(p["log"], "a") as f:
        f.write("%d\\n" % roi.index)
    if float(p.get("sleep", "0")):
        time.sleep(float(p["sleep"]))
    g = ndimage.gaussian_filter(block.astype(np.float64), float(p["sigma"]), mode="reflect",
                                truncate=4.0)
    return g.astype(np.float32)
'''


def blur_ref(region, dtype):
    g = ndimage.gaussian_filter(region.astype(np.float64), SIGMA, mode="reflect", truncate=4.0)
    if np.dtype(dtype).kind in "ui":
        info = np.iinfo(dtype)
        g = np.clip(np.rint(g), info.min, info.max)
    return g.astype(dtype)


def reference(orig, rois, times=1, outside_input=True, fill=0):
    """out = f(in) applied `times` times, assigning ROI results in list order, each ROI's
    result computed from the array as it was before that application."""
    cur = orig.copy()
    for _ in range(times):
        src = cur
        out = src.copy() if outside_input else np.full_like(src, fill)
        for box in rois:
            rs = [(max(0, a - HALO), min(n, b + HALO)) for (a, b), n in zip(box, src.shape)]
            g = blur_ref(src[tuple(slice(a, b) for a, b in rs)], src.dtype)
            out[tuple(slice(a, b) for a, b in box)] = \
                g[tuple(slice(a - r0, b - r0) for (a, b), (r0, _) in zip(box, rs))]
        cur = out
    return cur


def apply_task(tmp_path, dtype="<f4", compressor=None, output=None, rois=ROIS, process=None,
               outside="input"):
    rng = np.random.default_rng(7)
    data = (rng.random(SHAPE) * 1000).astype(dtype)
    out = {"outside": outside}
    out.update(output or {})
    proc = process or {"builtin": "gaussian", "param.sigma": SIGMA, "threads": 2}
    return make_task(tmp_path, data, CHUNKS, rois=rois, compressor=compressor, output=out,
                     process=proc, sections={"rois": {"halo": f"{HALO},{HALO}"}})


def read_input(path):
    return zarr.open(str(path), mode="r")[...]


def assert_result(path, want):
    got = read_input(path)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    else:
        d = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert d.max() <= 1 and np.count_nonzero(d) <= 2, d.max()


def file_ids(path):
    return {p.relative_to(path): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in Path(path).rglob("*") if p.is_file()}


def apply(roifs_bin, config, *args, env=None, timeout=120):
    if env is None:
        return run_roifs(roifs_bin, "apply", *args, config, timeout=timeout)
    return subprocess.run([roifs_bin, "apply", *map(str, args), str(config)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------- values, exactly once


def test_apply_values_and_once(tmp_path, roifs_bin):
    """Against the reference from the original input; the processor is called once per ROI;
    a rerun changes no file and says so."""
    (tmp_path / "blur.py").write_text(BLUR_PY)
    log = tmp_path / "calls.log"
    t = apply_task(tmp_path, process={"python": "blur.py:blur", "param.sigma": SIGMA,
                                      "param.log": log, "threads": 2})
    orig = t.inp.copy()
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0, r.stderr
    assert "peak scratch" in r.stderr and "now holds the result" in r.stderr
    assert_result(t.input, reference(orig, ROIS))
    calls = sorted(int(x) for x in log.read_text().split())
    assert calls == list(range(len(ROIS)))
    before = file_ids(t.input)
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0, r.stderr
    assert "already holds this result" in r.stderr and "nothing changed" in r.stderr
    assert file_ids(t.input) == before
    assert len(log.read_text().split()) == len(ROIS)


def test_apply_again(tmp_path, roifs_bin):
    """--again is a new application over the result: f(f(in)); without it, nothing."""
    t = apply_task(tmp_path)
    orig = t.inp.copy()
    assert apply(roifs_bin, t.config).returncode == 0
    r = apply(roifs_bin, t.config, "--again")
    assert r.returncode == 0, r.stderr
    assert_result(t.input, reference(orig, ROIS, times=2))
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0 and "nothing changed" in r.stderr


def test_apply_outside_fill_all_touched(tmp_path, roifs_bin):
    """outside = fill is fine when every chunk is touched: uncovered pixels become fill."""
    rois = [((0, 96), (0, 50)), ((0, 96), (40, 96))]
    t = apply_task(tmp_path, rois=rois, outside="fill", output={"fill_value": 0})
    orig = t.inp.copy()
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0, r.stderr
    assert_result(t.input, reference(orig, rois, outside_input=False))


# ---------------------------------------------------------------- formats


def export_v3(roifs_bin, tmp_path, t, output):
    """Writes t's input as a v3 array (roifs export with copy) and returns its path."""
    cfg = write_config(tmp_path / "mk3.ini", {
        "input": {"path": t.input}, "rois": {"grid": "96,96"}, "process": {"builtin": "copy"},
        "output": {"format": 3, **output}, "cache": {"dir": tmp_path / "cache_mk3"}})
    dest = tmp_path / "v3.zarr"
    r = run_roifs(roifs_bin, "export", cfg, dest, timeout=60)
    assert r.returncode == 0, r.stderr
    (dest / ".roifs-export").unlink(missing_ok=True)
    return dest


@pytest.mark.parametrize("output", [{"compressor": "zstd"},
                                    {"compressor": "blosc", "shard": "32,48"},
                                    {"shard": "48,32"}],
                         ids=["v3", "v3-sharded-blosc", "v3-sharded-raw"])
def test_apply_v3(tmp_path, roifs_bin, output):
    t = apply_task(tmp_path)
    dest = export_v3(roifs_bin, tmp_path, t, output)
    cfg = write_config(tmp_path / "ap3.ini", {
        "input": {"path": dest}, "rois": {"file": t.rois_file, "halo": f"{HALO},{HALO}"},
        "process": {"builtin": "gaussian", "param.sigma": SIGMA, "threads": 2},
        "output": {"format": 3, "outside": "input", **output},
        "cache": {"dir": tmp_path / "cache_ap3"}})
    r = apply(roifs_bin, cfg)
    assert r.returncode == 0, r.stderr
    meta = json.loads((dest / "zarr.json").read_text())
    assert meta["data_type"] == "float32"
    got = zarr_v3_read(dest, meta)
    np.testing.assert_allclose(got, reference(t.inp, ROIS), rtol=1e-5, atol=1e-3)


def zarr_v3_read(dest, meta):
    """A small v3 reader for the layouts this file writes (bytes little endian, optional
    zstd/blosc, optional sharding with the index at the end, crc32c on the index)."""
    shape = meta["shape"]
    grid_shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
    dt = np.dtype("<f4")
    out = np.zeros(shape, dt)
    codecs = meta["codecs"]
    shard = codecs[0]["name"] == "sharding_indexed"
    for idx in np.ndindex(*[-(-s // c) for s, c in zip(shape, grid_shape)]):
        p = dest / "c" / "/".join(map(str, idx))
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, grid_shape, shape))
        if not p.exists():
            continue
        raw = p.read_bytes()
        if not shard:
            block = decode_chain(raw, codecs, grid_shape, dt)
        else:
            conf = codecs[0]["configuration"]
            inner = conf["chunk_shape"]
            n = int(np.prod([g // i for g, i in zip(grid_shape, inner)]))
            index = np.frombuffer(raw[-(16 * n + 4):-4], "<u8").reshape(n, 2)
            block = np.zeros(grid_shape, dt)
            for k, iidx in enumerate(np.ndindex(*[g // i for g, i in zip(grid_shape, inner)])):
                off, nb = index[k]
                if off == 2 ** 64 - 1:
                    continue
                isl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(iidx, inner))
                block[isl] = decode_chain(raw[off:off + nb], conf["codecs"], inner, dt)
        out[sl] = block[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def decode_chain(raw, codecs, shape, dt):
    for c in reversed(codecs[1:]):
        if c["name"] == "zstd":
            raw = numcodecs.Zstd().decode(raw)
        elif c["name"] == "blosc":
            raw = numcodecs.Blosc().decode(raw)
        elif c["name"] == "crc32c":
            raw = raw[:-4]
    return np.frombuffer(bytes(raw), dt).reshape(shape)


# ---------------------------------------------------------------- kills


POINTS = ["tmp", "intent", "rename", "replaced", "compact"]


def test_apply_killed_at_every_step(tmp_path, roifs_bin):
    """SIGKILL at each step of a replacement (after the temporary file, after the intent
    record, between the rename and its record, after it, after dropping used results), one
    after another; then completion equals one application."""
    t = apply_task(tmp_path, compressor=numcodecs.Blosc(), output={
        "compressor": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "shuffle"})
    orig = t.inp.copy()
    killed = 0
    for i, point in enumerate(POINTS * 2):
        r = apply(roifs_bin, t.config, env={"ROIFS_TEST_APPLY_KILL": f"{point}:{1 + i % 3}"})
        if r.returncode == -signal.SIGKILL:
            killed += 1
        else:
            assert r.returncode == 0, r.stderr
    assert killed >= 6
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0, r.stderr
    assert_result(t.input, reference(orig, ROIS))
    assert not list(t.input.glob(".roifs-apply.*")), "temporary files left"


def test_apply_killed_at_random(tmp_path, roifs_bin):
    """kill -9 at random moments (a slow processor, so that kills land during computing,
    assembling and replacing), then completion: one application, never two anywhere."""
    (tmp_path / "blur.py").write_text(BLUR_PY)
    log = tmp_path / "calls.log"
    rois = [((y, min(96, y + 24)), (x, min(96, x + 24))) for y in range(0, 96, 20)
            for x in range(0, 96, 20)]
    t = apply_task(tmp_path, rois=rois, process={
        "python": "blur.py:blur", "param.sigma": SIGMA, "param.log": log,
        "param.sleep": "0.02", "threads": 2})
    orig = t.inp.copy()
    rnd = random.Random(3)
    for _ in range(6):
        p = subprocess.Popen([roifs_bin, "apply", str(t.config)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        time.sleep(rnd.uniform(0.3, 1.2))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=20)
    r = apply(roifs_bin, t.config, timeout=180)
    assert r.returncode == 0, r.stderr
    assert_result(t.input, reference(orig, rois))
    calls = [int(x) for x in log.read_text().split()]
    assert set(calls) == set(range(len(rois)))


# ---------------------------------------------------------------- readers during apply


def apply_while(roifs_bin, config, read_once):
    """roifs apply CONFIG while another thread calls read_once() again and again."""
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            read_once()
    th = threading.Thread(target=reader)
    th.start()
    try:
        return apply(roifs_bin, config)
    finally:
        stop.set()
        th.join(timeout=30)


def test_apply_readers_see_old_or_new(tmp_path, roifs_bin):
    """A reader decoding every input chunk file in a loop while apply replaces them: each
    decode succeeds and equals the old chunk or the new one."""
    t = apply_task(tmp_path, compressor=numcodecs.Blosc(), output={
        "compressor": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "shuffle"},
        process={"command": "sleep 0.05; cat", "threads": 2},
        rois=[((y, y + 16), (x, x + 16)) for y in range(0, 96, 16) for x in range(0, 96, 16)])
    orig = t.inp.copy()
    # The command copies its read region: the result equals the input, so compare bytes
    # against "decodes to the original": a torn file fails to decode.
    old = {}
    for p in t.input.iterdir():
        if p.name[0] != ".":
            old[p.name] = numcodecs.Blosc().decode(p.read_bytes())
    seen = {"decodes": 0, "bad": []}
    blosc = numcodecs.Blosc()

    def read_every_chunk():
        for name, want in old.items():
            try:
                got = blosc.decode((t.input / name).read_bytes())
            except Exception as e:  # noqa: BLE001
                seen["bad"].append((name, repr(e)))
                continue
            seen["decodes"] += 1
            if bytes(got) != bytes(want):
                seen["bad"].append((name, "other bytes"))
    r = apply_while(roifs_bin, t.config, read_every_chunk)
    assert r.returncode == 0, r.stderr
    assert not seen["bad"], seen["bad"][:5]
    assert seen["decodes"] > len(old)
    np.testing.assert_array_equal(read_input(t.input), orig)
    ids = {p.name: p.stat().st_ino for p in t.input.iterdir() if p.name[0] != "."}
    assert len(ids) == len(old)


def test_apply_reader_sees_new_values(tmp_path, roifs_bin):
    """Readers during apply of a Gaussian: every chunk decodes to its old or its new value."""
    t = apply_task(tmp_path, compressor=numcodecs.Blosc(), output={
        "compressor": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "shuffle"},
        process={"python": "blur.py:blur", "param.sigma": SIGMA, "param.log": tmp_path / "l",
                 "param.sleep": "0.01", "threads": 2})
    (tmp_path / "blur.py").write_text(BLUR_PY)
    orig = t.inp.copy()
    want = reference(orig, ROIS)
    versions = {}
    for idx in np.ndindex(SHAPE[0] // 16, SHAPE[1] // 16):
        sl = tuple(slice(i * 16, (i + 1) * 16) for i in idx)
        versions[".".join(map(str, idx))] = (orig[sl].tobytes(), want[sl])
    bad = []
    blosc = numcodecs.Blosc()

    def read_every_chunk():
        for name, (o, w) in versions.items():
            try:
                got = bytes(blosc.decode((t.input / name).read_bytes()))
            except Exception as e:  # noqa: BLE001
                bad.append((name, repr(e)))
                continue
            new = np.frombuffer(got, "<f4").reshape(16, 16)
            if got != o and not np.allclose(new, w, rtol=1e-5, atol=1e-3):
                bad.append((name, "neither old nor new"))
    r = apply_while(roifs_bin, t.config, read_every_chunk)
    assert r.returncode == 0, r.stderr
    assert not bad, bad[:5]
    assert_result(t.input, want)


# ---------------------------------------------------------------- refusals


def test_apply_concurrent_refused(tmp_path, roifs_bin):
    t = apply_task(tmp_path, process={"command": "sleep 0.2; cat", "threads": 1})
    p = subprocess.Popen([roifs_bin, "apply", str(t.config)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        assert p.poll() is None
        r = apply(roifs_bin, t.config)
        assert r.returncode == 2, r.stderr
        assert "another roifs apply is writing this array" in r.stderr
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    assert p.returncode == 128 + signal.SIGINT
    # Ctrl-C stopped it cleanly: the same command finishes the job.
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(read_input(t.input), t.inp)


@pytest.mark.parametrize("case,needle", [
    ("dtype", "[output] dtype"),
    ("chunks", "[output] chunks"),
    ("encoding", "encoding"),
    ("format", "[output] format"),
    ("fill_untouched", "[output] outside"),
    ("ome_output", "[output] ome"),
])
def test_apply_refusals(tmp_path, roifs_bin, case, needle):
    output = {"dtype": {"dtype": "<u2"}, "chunks": {"chunks": "32,32"},
              "encoding": {"compressor": "zstd"}, "format": {"format": 3},
              "ome_output": {"ome": "true"}}.get(case, {})
    rois = {"fill_untouched": [((0, 20), (0, 20))], "dtype": [((0, 96), (0, 96))]}.get(case, ROIS)
    # outside = input needs the same dtype already (a check of every command)
    outside = "fill" if case in ("fill_untouched", "dtype") else "input"
    t = apply_task(tmp_path, output=output, rois=rois, outside=outside)
    before = file_ids(t.input)
    r = apply(roifs_bin, t.config)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("roifs: ") and needle in r.stderr, r.stderr
    assert str(t.config) in r.stderr
    assert file_ids(t.input) == before


def test_apply_usage_errors(tmp_path, roifs_bin):
    t = apply_task(tmp_path)
    for args in (["--bogus", t.config], [], [t.config, t.config], ["-j", "0", t.config]):
        r = run_roifs(roifs_bin, "apply", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("roifs: ")


def test_apply_ome_group_refused_level_noted(tmp_path, roifs_bin):
    """An image group is refused; its level array is applied, with the other levels named
    stale."""
    img = tmp_path / "img.zarr"
    g = zarr.open_group(str(img), mode="w")
    data = (np.random.default_rng(1).random(SHAPE) * 100).astype("<f4")
    g.create_dataset("0", data=data, chunks=CHUNKS, compressor=None)
    g.create_dataset("1", data=data[::2, ::2], chunks=CHUNKS, compressor=None)
    g.attrs["multiscales"] = [{"version": "0.4", "axes": [
        {"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        "datasets": [{"path": str(i), "coordinateTransformations": [
            {"type": "scale", "scale": [2.0 ** i, 2.0 ** i]}]} for i in range(2)]}]
    (tmp_path / "rois.txt").write_text("0:96, 0:96\n")
    secs = {"input": {"path": img}, "rois": {"file": "rois.txt", "halo": f"{HALO},{HALO}"},
            "process": {"builtin": "gaussian", "param.sigma": SIGMA},
            "output": {"outside": "input"}, "cache": {"dir": tmp_path / "cache"}}
    cfg = write_config(tmp_path / "grp.ini", secs)
    r = apply(roifs_bin, cfg)
    assert r.returncode == 2 and "OME-Zarr image group" in r.stderr, r.stderr
    secs["input"]["path"] = img / "0"
    cfg = write_config(tmp_path / "lvl.ini", secs)
    r = apply(roifs_bin, cfg)
    assert r.returncode == 0, r.stderr
    assert "other levels were not rewritten and are stale" in r.stderr
    assert_result(img / "0", reference(data, [((0, 96), (0, 96))]))


def test_apply_read_only_input_refused(tmp_path, roifs_bin):
    """An input on a read-only mount (root may write anything else)."""
    t = apply_task(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(t.input), str(ro)], check=True, timeout=10)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True, timeout=10)
        cfg = write_config(tmp_path / "ro.ini", {
            "input": {"path": ro}, "rois": {"file": t.rois_file},
            "process": {"builtin": "copy"}, "output": {"outside": "input"},
            "cache": {"dir": tmp_path / "cache_ro"}})
        r = apply(roifs_bin, cfg)
        assert r.returncode == 2, r.stderr
        assert "not writable" in r.stderr
    finally:
        subprocess.run(["umount", str(ro)], timeout=10)


def test_apply_failed_roi_then_finished(tmp_path, roifs_bin):
    """A failing ROI: exit status 1, its chunks keep their input, the others are replaced;
    once it works the same command finishes (without the ROIs already applied)."""
    rois = [((y, y + 32), (x, x + 32)) for y in range(0, 96, 32) for x in range(0, 96, 32)]
    t = apply_task(tmp_path, rois=rois, process={
        "command": f'[ "$ROIFS_ROI" != 4 ] || [ -e {tmp_path}/ok ] || exit 3; '
                   f'echo $ROIFS_ROI >> {tmp_path}/calls; cat', "threads": 2})
    before = file_ids(t.input)
    r = apply(roifs_bin, t.config)
    assert r.returncode == 1, r.stderr
    assert "roi 4" in r.stderr and "run the same command again" in r.stderr
    after = file_ids(t.input)
    assert after[Path("2.2")] == before[Path("2.2")]  # under the failed ROI 4 (32:64)
    assert after[Path("0.0")] != before[Path("0.0")]
    (tmp_path / "ok").touch()
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0, r.stderr
    calls = [int(x) for x in (tmp_path / "calls").read_text().split()]
    assert sorted(calls) == list(range(len(rois)))
    np.testing.assert_array_equal(read_input(t.input), t.inp)


def test_apply_input_changed_meanwhile(tmp_path, roifs_bin):
    """An input chunk rewritten by something else while an application is unfinished: the
    rerun stops with exit status 1 naming it instead of mixing inputs."""
    t = apply_task(tmp_path)
    r = apply(roifs_bin, t.config, env={"ROIFS_TEST_APPLY_KILL": "replaced:2"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    z = zarr.open(str(t.input), mode="r+")
    z[80:96, 80:96] = 1.0  # chunk 5.5, replaced last
    r = apply(roifs_bin, t.config)
    assert r.returncode == 1, r.stderr
    assert "5.5: changed by something other than this apply" in r.stderr


def test_apply_progress_bar_on_a_terminal(tmp_path, roifs_bin):
    """Progress as warm shows it, with the chunks replaced and the scratch in use."""
    import re
    t = apply_task(tmp_path, process={"command": "sleep 0.1; cat", "threads": 1})
    rc, text = run_on_terminal([roifs_bin, "apply", str(t.config)], 60)
    assert rc == 0, text
    bars = re.findall(r"\rroifs: apply \[([#.]{24})\] +(\d+)% \d+/6 ROIs, \d+/36 chunks, "
                      r"(\d+)/36 replaced, scratch [\d.]+ (?:B|KiB|MiB)", text)
    assert len(bars) >= 3, text
    assert bars[-1][0] == "#" * 24 and bars[-1][2] == "36", text
    assert "peak scratch" in text


def test_clean_refused_while_an_application_is_unfinished(tmp_path, roifs_bin):
    """`roifs clean` and `clean --unused` would drop the journal (or results named by the
    original input) that an interrupted apply needs to finish without applying a ROI twice:
    both refuse (exit 2) until it finished, then clean as usual."""
    t = apply_task(tmp_path)
    orig = t.inp.copy()
    r = apply(roifs_bin, t.config, env={"ROIFS_TEST_APPLY_KILL": "replaced:2"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    for args in (["clean"], ["clean", "--unused"]):
        r = run_roifs(roifs_bin, *args, t.config)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "an unfinished `roifs apply` (2 of 36 input files replaced)" in r.stderr, r.stderr
        assert f"finish it with `roifs apply {t.config}` first" in r.stderr, r.stderr
        assert (t.cache / "apply" / "journal").exists()
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0, r.stderr
    assert_result(t.input, reference(orig, ROIS))
    r = run_roifs(roifs_bin, "clean", "--unused", t.config)
    assert r.returncode == 0, r.stderr
    r = run_roifs(roifs_bin, "clean", t.config)
    assert r.returncode == 0 and not t.cache.exists(), r.stderr


# ---------------------------------------------------------------- retried from elsewhere


def moved_config(tmp_path, t, cache, sigma=SIGMA):
    """A copy of t's configuration in another directory, as a workflow manager makes it:
    absolute paths; cache "other": another [cache] dir, "default": none (the default cache
    is named by the configuration's path); returns (config, env)."""
    other = tmp_path / "elsewhere"
    other.mkdir(exist_ok=True)
    secs = {"input": {"path": t.input}, "rois": {"file": t.rois_file, "halo": f"{HALO},{HALO}"},
            "process": {"builtin": "gaussian", "param.sigma": sigma, "threads": 2},
            "output": {"outside": "input"},
            "cache": {"dir": other / "cache"} if cache == "other" else None}
    return (write_config(other / f"copy-{sigma}.ini", secs),
            {"XDG_CACHE_HOME": str(other / "xdg")})


def assert_plain_zarr(path):
    """What a zarr-python read of the input sees: the array, its 36 chunks, nothing else."""
    z = zarr.open(str(path), mode="r")
    assert z.nchunks_initialized == 36
    keys = set(z.store.keys())
    assert keys == {".zarray"} | {f"{i}.{j}" for i in range(6) for j in range(6)}, keys
    assert not (Path(path) / ".roifs-apply").exists()


@pytest.mark.parametrize("cache", ["other", "default"])
@pytest.mark.parametrize("point", ["replaced:10", "begun:1", "marker:1", "finished:1"])
def test_apply_retried_from_a_copy_of_the_configuration(tmp_path, roifs_bin, cache, point):
    """Killed (after 10 of 36 replacements; after the journal began; after the input's marker
    was written; after the journal's end, before the marker went), then run again from a copy
    of the configuration in another directory with another cache directory: the input's
    .roifs-apply names the job and its journal, so the retry finishes it with f applied
    exactly once everywhere, and removes the marker."""
    t = apply_task(tmp_path)
    orig = t.inp.copy()
    r = apply(roifs_bin, t.config, env={"ROIFS_TEST_APPLY_KILL": point})
    assert r.returncode == -signal.SIGKILL, r.stderr
    cfg, env = moved_config(tmp_path, t, cache)
    r = apply(roifs_bin, cfg, env=env)
    assert r.returncode == 0, r.stderr
    assert_result(t.input, reference(orig, ROIS))
    assert_plain_zarr(t.input)
    if point in ("replaced:10", "marker:1"):
        assert "resuming: " in r.stderr and "which this run uses" in r.stderr, r.stderr
    if point == "finished:1":
        assert "already holds this result" in r.stderr, r.stderr
    # and from the original configuration: nothing left to do; after "begun" its journal
    # names an application that never replaced anything, of an input changed since: refused
    r = apply(roifs_bin, t.config)
    if point == "begun:1":
        assert r.returncode == 1, r.stderr
        assert "changed by something other than this apply" in r.stderr, r.stderr
    else:
        assert r.returncode == 0 and "nothing changed" in r.stderr, r.stderr
    assert_result(t.input, reference(orig, ROIS))


def test_apply_unfinished_refuses_another_job(tmp_path, roifs_bin):
    """An unfinished application recorded in the input refuses another job (another sigma,
    from another configuration), exit 2, the input untouched; zarr-python reads the input with
    the marker in it; once the first job is finished the other one may run."""
    t = apply_task(tmp_path)
    orig = t.inp.copy()
    r = apply(roifs_bin, t.config, env={"ROIFS_TEST_APPLY_KILL": "replaced:10"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    before = file_ids(t.input)
    cfg, env = moved_config(tmp_path, t, "other", sigma=2.5)
    for args in ([], ["--again"]):
        r = apply(roifs_bin, cfg, *args, env=env)
        assert r.returncode == 2, r.stderr
        assert "an application of another job is unfinished" in r.stderr, r.stderr
        assert f"finish it with `roifs apply {t.config}`" in r.stderr, r.stderr
        assert file_ids(t.input) == before
    marker = json.loads((t.input / ".roifs-apply").read_text())
    assert marker["cache"] == str(t.cache) and marker["config"] == str(t.config), marker
    z = zarr.open(str(t.input), mode="r")
    assert z.nchunks_initialized == 36 and z[...].shape == SHAPE
    r = apply(roifs_bin, t.config)
    assert r.returncode == 0, r.stderr
    assert_result(t.input, reference(orig, ROIS))
    assert_plain_zarr(t.input)
    r = apply(roifs_bin, cfg, env=env)
    assert r.returncode == 0, r.stderr


def test_apply_marker_without_its_journal_refused(tmp_path, roifs_bin):
    """The input records an unfinished application of this job whose cache was deleted, or
    its record is damaged: refused (exit 2), the input untouched, not begun again."""
    import shutil
    t = apply_task(tmp_path)
    r = apply(roifs_bin, t.config, env={"ROIFS_TEST_APPLY_KILL": "replaced:10"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    shutil.rmtree(t.cache)
    before = file_ids(t.input)
    cfg, env = moved_config(tmp_path, t, "other")
    for c in (t.config, cfg):
        r = apply(roifs_bin, c, env=env)
        assert r.returncode == 2, r.stderr
        assert "records an unfinished application of this job" in r.stderr, r.stderr
        assert "apply/journal is gone" in r.stderr, r.stderr
        assert file_ids(t.input) == before
    (t.input / ".roifs-apply").write_text("{}")
    before = file_ids(t.input)
    r = apply(roifs_bin, cfg, env=env)
    assert r.returncode == 2, r.stderr
    assert ".roifs-apply: not a record that roifs wrote" in r.stderr, r.stderr
    assert file_ids(t.input) == before


def test_clean_after_a_kill_at_the_end_drops_the_marker(tmp_path, roifs_bin):
    """Killed after the journal's end, before the input's marker went: `roifs clean`, about
    to delete the journal that says the application finished, removes the marker first, so
    that no later apply takes the array for a mix whose journal is gone."""
    t = apply_task(tmp_path)
    orig = t.inp.copy()
    r = apply(roifs_bin, t.config, env={"ROIFS_TEST_APPLY_KILL": "finished:1"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert (t.input / ".roifs-apply").exists()
    r = run_roifs(roifs_bin, "clean", t.config)
    assert r.returncode == 0 and not t.cache.exists(), r.stderr
    assert_result(t.input, reference(orig, ROIS))
    assert_plain_zarr(t.input)
