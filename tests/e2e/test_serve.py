"""roifs serve (docs/serve.md): the tree a mount presents, over HTTP. Zarr over HTTP reads the
same array; ranges, ETag/304, 404 for chunks no ROI touches and for directories (HTML listings
with --listings), 500 with the reason for a failed ROI, CORS, the bearer token, TLS; a slow ROI
holds no server thread; the status page; SIGINT and SIGTERM stop it with exit status 0."""
import html
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import fsspec
import numpy as np
import pytest
import zarr

from conftest import PY, make_task, mounted, run_roifs
from serving import http_status, served, wait_then_hang_up

# Multiplies <i4 input by 10. ROI 0 sleeps while the file `slow` exists (the seconds it
# holds, 20 when empty); ROI 1 fails while
# the file `fail` exists. Each call appends its ROI to `calls`.
TIMES10 = """\
import array, os, sys, time
d = sys.argv[1]
data = sys.stdin.buffer.read()
roi = os.environ["ROIFS_ROI"]
with open(os.path.join(d, "calls"), "a") as f:
    f.write(roi + "\\n")
if roi == "0" and os.path.exists(os.path.join(d, "slow")):
    time.sleep(float(open(os.path.join(d, "slow")).read() or 20))
if roi == "1" and os.path.exists(os.path.join(d, "fail")):
    sys.stderr.write("boom: roi 1 failed on purpose\\n")
    sys.exit(3)
a = array.array("i")
a.frombytes(data)
sys.stdout.buffer.write(array.array("i", (10 * x for x in a)).tobytes())
"""

# 8x8 in 2x2 chunks (16); ROI i is chunk i for i < 12; chunks 12..15 have no ROI.
ROIS = [((2 * (i // 4), 2 * (i // 4) + 2), (2 * (i % 4), 2 * (i % 4) + 2)) for i in range(12)]


def job(tmp_path, compressor="blosc", threads=2):
    script = tmp_path / "times10.py"
    script.write_text(TIMES10)
    data = np.arange(1, 65, dtype="<i4").reshape(8, 8)
    task = make_task(tmp_path, data, (2, 2), rois=ROIS,
                     process={"command": f"{PY} {script} {tmp_path}", "threads": threads},
                     output={"compressor": compressor, "fill_value": 0})
    want = np.zeros((8, 8), "<i4")
    want[:6] = data[:6] * 10
    return task, want


def calls(tmp_path):
    p = tmp_path / "calls"
    return p.read_text().split() if p.exists() else []


@pytest.mark.timeout(60)
def test_zarr_over_http_and_the_http_semantics(tmp_path, roifs_bin):
    task, want = job(tmp_path)
    with served(roifs_bin, task.config) as s:
        # zarr-python through fsspec's HTTP store: 404 chunks read as the fill value
        store = fsspec.get_mapper(s.url)
        np.testing.assert_array_equal(zarr.open(store, mode="r")[...], want)
        st, h, meta = s.request("/.zarray")
        assert st == 200 and json.loads(meta)["chunks"] == [2, 2]
        assert h["content-type"] == "application/json"
        # a chunk no ROI touches, directories and unknown names: 404; only GET and HEAD
        for path in ("/3.0", "/3.3", "/.roifs", "/.roifs/", "/0.0/", "/0.9", "/00.0", "/x"):
            assert s.request(path)[0] == 404, path
        assert s.request("/0.0", method="POST")[0] == 405
        # exact length, HEAD alike, ranges
        st, h, body = s.request("/1.1")
        assert st == 200 and int(h["content-length"]) == len(body) > 0
        assert h["accept-ranges"] == "bytes"
        st, hh, nobody = s.request("/1.1", method="HEAD")
        assert st == 200 and nobody == b"" and hh["content-length"] == h["content-length"]
        n = len(body)
        st, hr, part = s.request("/1.1", headers={"Range": "bytes=2-5"})
        assert st == 206 and part == body[2:6] and hr["content-range"] == f"bytes 2-5/{n}"
        st, hr, part = s.request("/1.1", headers={"Range": "bytes=-3"})
        assert st == 206 and part == body[-3:] and hr["content-length"] == "3"
        st, hr, part = s.request("/1.1", headers={"Range": "bytes=4-"})
        assert st == 206 and part == body[4:]
        st, hr, _ = s.request("/1.1", headers={"Range": f"bytes={n}-"})
        assert st == 416 and hr["content-range"] == f"bytes */{n}"
        # keep-alive: one connection for several requests (also after a 404)
        c = s.conn()
        socks = []
        for path in ("/1.1", "/3.3", "/1.2", "/.zarray"):
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            assert r.getheader("Connection") != "close", path
            socks.append(c.sock)
        c.close()
        assert all(k is socks[0] for k in socks)
        # ETag from the chunk's key; 304 when it matches, 200 otherwise
        etag = h["etag"]
        assert etag.startswith('"') and len(etag) == 34
        st, h304, b304 = s.request("/1.1", headers={"If-None-Match": etag})
        assert st == 304 and b304 == b"" and h304["etag"] == etag
        assert s.request("/1.1", headers={"If-None-Match": '"0"'})[0] == 200
        assert s.request("/1.2")[1]["etag"] != etag
        # the status document and the page
        st, h, doc = s.request("/.roifs/status")
        doc = json.loads(doc)
        assert st == 200 and doc["rois"]["done"] == 12 and doc["chunks"]["cached"] == 12
        st, h, page = s.request("/")
        assert st == 200 and h["content-type"].startswith("text/html")
        assert b'id="n-done">12<' in page and b'http-equiv="refresh"' in page
    assert sorted(map(int, calls(tmp_path))) == list(range(12))  # each ROI once


@pytest.mark.timeout(90)
def test_a_slow_roi_holds_no_server_thread(tmp_path, roifs_bin):
    """ROI 0 takes 20 s: 12 readers of its chunk (more than the server's 8 threads) wait, and every
    other chunk and the status are answered at once meanwhile; SIGTERM then answers the
    waiting readers (503) and stops the server with exit status 0."""
    task, want = job(tmp_path, threads=3)
    (tmp_path / "slow").touch()
    with served(roifs_bin, task.config) as s:
        results = []

        def slow_reader():
            try:
                results.append(s.request("/0.0", timeout=40)[0])
            except Exception as e:
                results.append(repr(e))

        readers = [threading.Thread(target=slow_reader) for _ in range(12)]
        for t in readers:
            t.start()
        deadline = time.monotonic() + 10
        while "0" not in calls(tmp_path):
            assert time.monotonic() < deadline, "ROI 0 never started"
            time.sleep(0.05)
        t0 = time.monotonic()
        for i in range(1, 12):
            st, _, body = s.request(f"/{i // 4}.{i % 4}", timeout=5)
            assert st == 200 and body
        st, _, doc = s.request("/.roifs/status", timeout=5)
        assert st == 200 and json.loads(doc)["rois"]["running"] >= 1
        assert s.request("/", timeout=5)[0] == 200
        took = time.monotonic() - t0
        assert took < 4, f"other chunks took {took:.1f} s behind the slow ROI"
        assert not results, "the slow chunk was answered before its ROI ended"
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(15) == 0
        for t in readers:
            t.join(10)
        assert time.monotonic() - t0 < 12
        assert results == [503] * 12, results  # answered, not dropped


@pytest.mark.timeout(60)
def test_a_failed_roi_is_500_with_its_reason(tmp_path, roifs_bin):
    """A failed ROI: 500 with its reason at once, the other chunks served; its chunk is not
    computed again for [process] retry_after seconds (10 for serve when unset: the status says
    when), then it is."""
    task, want = job(tmp_path)
    (tmp_path / "fail").touch()
    with served(roifs_bin, task.config) as s:
        t0 = time.monotonic()
        st, h, body = s.request("/0.1")
        assert st == 500 and b"boom: roi 1 failed on purpose" in body and b"ROI 1" in body
        assert time.monotonic() - t0 < 5
        failed_at = time.time()
        assert s.request("/0.0")[0] == 200 and s.request("/0.2")[0] == 200
        st, _, page = s.request("/")
        assert b'id="n-failed">1<' in page and b"boom: roi 1 failed" in page
        (tmp_path / "fail").unlink()
        for _ in range(3):  # within the 10 s: 500 again at once, without running it
            st, _, body = s.request("/0.1")
            assert st == 500 and b"boom" in body
        assert calls(tmp_path).count("1") == 1
        err, = json.loads(s.request("/.roifs/status")[2])["errors"]
        assert 8 < err["retry_at"] - failed_at <= 10.5
        assert b"not tried again before" in s.request("/")[2]
    set_option_in(task.config, "process", "retry_after = 1")
    (tmp_path / "fail").touch()
    with served(roifs_bin, task.config) as s:
        assert s.request("/0.1")[0] == 500
        (tmp_path / "fail").unlink()
        assert s.request("/0.1")[0] == 500  # held for 1 s
        time.sleep(1.2)
        st, _, body = s.request("/0.1")  # then tried again on demand
        assert st == 200, body
    assert calls(tmp_path).count("1") == 3


def set_option_in(config, section, line):
    """Adds line to [section] of config."""
    text = config.read_text()
    config.write_text(text.replace(f"[{section}]\n", f"[{section}]\n{line}\n", 1))


@pytest.mark.timeout(60)
def test_token_and_cors(tmp_path, roifs_bin):
    task, want = job(tmp_path)
    tok = tmp_path / "token"
    tok.write_text("s3cret-token\n")
    os.chmod(tok, 0o640)
    r = run_roifs(roifs_bin, "serve", task.config, "--token-file", tok)  # options after CONFIG
    assert r.returncode == 2 and "chmod 600" in r.stderr
    os.chmod(tok, 0o600)
    args = ["--token-file", tok, "--cors", "https://viewer.example, http://localhost:3000"]
    with served(roifs_bin, task.config, args) as s:
        ok = {"Authorization": "Bearer s3cret-token"}
        assert s.request("/.zarray")[0] == 401
        assert s.request("/.zarray", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert s.request("/.zarray", headers={"Authorization": "Bearer s3cret-token2"})[0] == 401
        assert s.request("/0.0", headers=ok)[0] == 200
        origin = {"Origin": "http://localhost:3000"}
        st, h, _ = s.request("/0.0", headers={**ok, **origin})
        assert st == 200 and h["access-control-allow-origin"] == "http://localhost:3000"
        assert "ETag" in h["access-control-expose-headers"]
        st, h, _ = s.request("/0.0", headers=origin)  # errors carry it too
        assert st == 401 and h["access-control-allow-origin"] == "http://localhost:3000"
        st, h, _ = s.request("/0.0", headers={**ok, "Origin": "https://evil.example"})
        assert st == 200 and "access-control-allow-origin" not in h
        pre = {"Origin": "https://viewer.example", "Access-Control-Request-Method": "GET",
               "Access-Control-Request-Headers": "authorization, range"}
        st, h, _ = s.request("/0.0", method="OPTIONS", headers=pre)  # no token needed
        assert st == 204 and h["access-control-allow-origin"] == "https://viewer.example"
        assert "GET" in h["access-control-allow-methods"]
        assert "range" in h["access-control-allow-headers"]
        assert "s3cret" not in s.log_text()
        assert "s3cret" not in s.request("/.roifs/status", headers=ok)[2].decode()
    with served(roifs_bin, task.config) as s:  # no --cors: no CORS header at all
        st, h, _ = s.request("/0.0", headers={"Origin": "http://localhost:3000"})
        assert st == 200 and "access-control-allow-origin" not in h


@pytest.mark.timeout(60)
def test_tls_and_sigint(tmp_path, roifs_bin):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1"], check=True,
                   capture_output=True, timeout=60)
    task, want = job(tmp_path)
    r = run_roifs(roifs_bin, "serve", "--tls-cert", cert, task.config)
    assert r.returncode == 2 and "--tls-key" in r.stderr
    with served(roifs_bin, task.config, ["--tls-cert", cert, "--tls-key", key]) as s:
        assert s.scheme == "https"
        st, h, body = s.request("/0.0")
        assert st == 200 and int(h["content-length"]) == len(body)
        s.proc.send_signal(signal.SIGINT)
        assert s.proc.wait(15) == 0


@pytest.mark.timeout(60)
def test_a_client_that_goes_away_is_let_go(tmp_path, roifs_bin):
    """A client that hangs up while its chunk computes is noticed and its connection closed at
    once (the status's http.waiting back to 0, http.gone 1); the chunk still lands in the cache,
    computed once, and the server serves on and stops with exit status 0."""
    task, want = job(tmp_path)
    (tmp_path / "slow").write_text("3")
    with served(roifs_bin, task.config) as s:
        c = socket.create_connection((s.host, s.port), timeout=5)
        c.sendall(b"GET /0.0 HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 5
        while http_status(s)["waiting"] != 1:
            assert time.monotonic() < deadline, "the request never waited"
            time.sleep(0.05)
        c.close()
        t0 = time.monotonic()
        while http_status(s)["waiting"] != 0:
            assert time.monotonic() - t0 < 2, "the server did not let the client go"
            time.sleep(0.05)
        assert http_status(s)["gone"] == 1
        assert s.request("/1.1")[0] == 200
        deadline = time.monotonic() + 10
        while json.loads(s.request("/.roifs/status")[2])["rois"]["running"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        t0 = time.monotonic()
        st, _, body = s.request("/0.0")
        assert st == 200 and time.monotonic() - t0 < 1
    assert calls(tmp_path).count("0") == 1


@pytest.mark.timeout(90)
def test_a_client_that_goes_away_cancels_its_interest(tmp_path, roifs_bin):
    """One compute thread, no read-ahead: ROI 0 (chunk 0.0) runs for 8 s; a client asks for
    chunk 1.1 (ROI 5) behind it and hangs up. Its request is withdrawn from the engine (the
    status's http.held, requests the engine still owes an answer, goes to 0), and a chunk asked
    for next (2.2, ROI 10) is computed right after ROI 0: ROI 5, which nobody wants any more,
    is not computed (the server used to keep its place and compute it first). Asked again,
    1.1 is served right."""
    task, want = job(tmp_path, threads=1)
    text = task.config.read_text().replace("[process]\n", "[process]\nreadahead = 0\n")
    task.config.write_text(text)
    (tmp_path / "slow").write_text("8")  # the margin for the hang-ups to be seen before it ends
    with served(roifs_bin, task.config) as s:
        h = wait_then_hang_up(s, ("/0.0", "/1.1"), lambda: calls(tmp_path) == ["0"], 10)
        assert h["gone"] == 2 and h["held"] == 0, h
        st, _, body = s.request("/2.2", timeout=40)
        assert st == 200
        assert calls(tmp_path) == ["0", "10"]
        st, _, body = s.request("/1.1", timeout=40)
        assert st == 200
        got = zarr.open(fsspec.get_mapper(s.url), mode="r")[2:4, 2:4]
        np.testing.assert_array_equal(got, want[2:4, 2:4])
    assert sorted(calls(tmp_path)) == ["0", "10", "5"]


def tree_of(root):
    """(files, directories) under root, relative, sorted."""
    files, dirs = [], []
    for p in sorted(Path(root).rglob("*")):
        (files if p.is_file() else dirs).append(p.relative_to(root).as_posix())
    return files, dirs


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["pyramid", "overlay"])
def test_the_tree_a_mount_presents(tmp_path, roifs_bin, kind):
    """Every file of a mount of the same job (an OME-Zarr image with its pyramid; a label
    overlay with the input's files, the label image and its masking table) is served with
    the same bytes, every directory is 404, and serve and the mount share the cache: each
    ROI computed once between them."""
    if kind == "pyramid":
        data = np.arange(40 * 36, dtype="<u2").reshape(40, 36)
        rois = [((y, y + 10), (x, x + 12)) for y in range(0, 40, 10) for x in range(0, 36, 12)]
        task = make_task(tmp_path, data, (8, 8), rois=rois,
                         process={"builtin": "add", "param.value": 1},
                         output={"ome": "true", "levels": 3})
        config, array = task.config, "0"
    else:
        from test_overlay import make_image, overlay_config
        img, _ = make_image(tmp_path, "0.4")
        config, array = overlay_config(tmp_path, img, table="seg_table"), "labels/seg/0"
    with served(roifs_bin, config) as s:
        over_http = zarr.open(fsspec.get_mapper(f"{s.url}/{array}"), mode="r")[...]
        with mounted(roifs_bin, config) as m:
            files, dirs = tree_of(m.path)
            assert len(files) > 10 and dirs
            for rel in files:
                if rel == ".roifs/status":
                    continue
                st, h, body = s.request("/" + rel)
                assert st == 200, rel
                assert body == (m.path / rel).read_bytes(), rel
            for rel in dirs:
                assert s.request("/" + rel)[0] == 404, rel
                assert s.request("/" + rel + "/")[0] == 404, rel
            np.testing.assert_array_equal(over_http, zarr.open(str(m.path / array))[...])
            mount_calls = m.status()["calls"]
        served_calls = json.loads(s.request("/.roifs/status")[2])["calls"]
        total = json.loads(s.request("/.roifs/status")[2])["rois"]["total"]
    assert served_calls + mount_calls == total


@pytest.mark.timeout(60)
def test_a_failed_label_image_fails_its_table_with_the_reason(tmp_path, roifs_bin):
    """ome = labels with a masking table whose ROIs all fail: a file of the table is a 500
    naming the failed ROIs (the table is made from every chunk of the label image)."""
    from test_overlay import make_image, overlay_config
    img, _ = make_image(tmp_path, "0.4")
    config = overlay_config(tmp_path, img, table="seg_table")
    text = config.read_text().replace("builtin = label", "command = sh -c 'echo nope >&2; exit 3'")
    config.write_text("\n".join(l for l in text.splitlines() if not l.startswith("param.")) + "\n")
    with served(roifs_bin, config) as s:
        st, _, body = s.request("/tables/seg_table/.zattrs", timeout=20)
        assert st == 500 and b"ROI 0 failed" in body and b"nope" in body, body
        assert s.request("/.zattrs")[0] == 200  # the input's own files still served


# ---- --listings: directories as HTML listings (docs/serve.md, Directory listings) ----

LINK = re.compile(r'<a href="([^"]*)">')


def listing(s, url, headers=None):
    """The links of the listing at url but its parent's ("../"), as given (percent-encoded)."""
    st, h, body = s.request(url, headers=headers)
    assert st == 200 and h["content-type"].startswith("text/html"), (url, st, body[:300])
    return [html.unescape(a) for a in LINK.findall(body.decode()) if not a.startswith("../")]


def walk_listings(s):
    """(files, directories) the listings from the root's (/?ls) on link to, relative and
    sorted, and {file: its URL} following the links."""
    files, dirs, urls = [], [], {}

    def go(base, rel):
        for href in listing(s, base + ("?ls" if base == "/" else "")):
            name = urllib.parse.unquote(href)
            if name.endswith("/"):
                dirs.append(rel + name[:-1])
                go(base + href, rel + name)
            else:
                files.append(rel + name)
                urls[rel + name] = base + href

    go("/", "")
    return sorted(files), sorted(dirs), urls


def listed_size(s, url):
    """The size the listing of url's directory gives url's file ('-': not known)."""
    base, href = url.rsplit("/", 1)
    st, _, body = s.request(base + "/" + ("?ls" if not base else ""))
    m = re.search(r'<a href="' + re.escape(href) + r'">[^<]*</a> +(\S+)\n', body.decode())
    assert st == 200 and m, (url, body[:500])
    return m.group(1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["pyramid", "overlay"])
def test_listings_name_what_a_mount_lists(tmp_path, roifs_bin, kind):
    """--listings: every directory's listing names exactly what the mount's directory holds
    (the root's at /?ls, / being the status page), with relative links that serve the mount's
    bytes, sizes only where known without computing (a compressed chunk's once computed, an
    uncompressed one's at once), names escaped
    (an input file named `a<b&c d.txt`); listing the whole tree computes nothing (calls 0,
    chunks cached 0); a directory's URL without its slash is 301 to it."""
    if kind == "pyramid":
        data = np.arange(40 * 36, dtype="<u2").reshape(40, 36)
        rois = [((y, y + 10), (x, x + 12)) for y in range(0, 40, 10) for x in range(0, 36, 12)]
        task = make_task(tmp_path, data, (8, 8), rois=rois,
                         process={"builtin": "add", "param.value": 1},
                         output={"ome": "true", "levels": 3, "compressor": "blosc"})
        config, chunk = task.config, "/0/1.1"
    else:
        from test_overlay import make_image, overlay_config
        img, _ = make_image(tmp_path, "0.4")
        (img / "a<b&c d.txt").write_text("odd name\n")  # the input's files are presented
        config, chunk = overlay_config(tmp_path, img, table="seg_table"), "/labels/seg/0/1.1"
    with served(roifs_bin, config, ["--listings"]) as s:
        files, dirs, urls = walk_listings(s)
        doc = json.loads(s.request("/.roifs/status")[2])
        assert doc["calls"] == 0 and doc["chunks"]["cached"] == 0, doc  # nothing computed
        st, h, _ = s.request("/" + dirs[0])
        assert st == 301 and h["location"] == "/" + urllib.parse.quote(dirs[0]) + "/"
        assert b"files</a>" in s.request("/")[2]  # the status page links to /?ls
        if kind == "overlay":
            root = s.request("/?ls")[2].decode()
            assert ('<a href="a%3Cb%26c%20d.txt">a&lt;b&amp;c d.txt</a>' in root
                    and "a<b" not in root), root
            assert s.request(urls["a<b&c d.txt"])[2] == b"odd name\n"
        # not computed: compressed, its size is not known; uncompressed 20 x 16 <u4, it is
        assert listed_size(s, chunk) == ("-" if kind == "pyramid" else str(20 * 16 * 4))
        assert listed_size(s, urls[".zattrs"]) == str(len(s.request(urls[".zattrs"])[2]))
        st, _, body = s.request(chunk)
        assert st == 200 and listed_size(s, chunk) == str(len(body))
        with mounted(roifs_bin, config) as m:
            assert (files, dirs) == tree_of(m.path)
            assert chunk[1:] in files and ".roifs/status" in files
            for rel in (chunk[1:], ".zattrs", files[-1]):
                assert s.request(urls[rel])[2] == (m.path / rel).read_bytes(), rel


@pytest.mark.timeout(60)
def test_listings_off_and_the_token(tmp_path, roifs_bin):
    """Without --listings a directory's URL is 404 and /?ls the status page; with it, a
    listing needs the bearer token as a file does and carries the CORS header."""
    task, want = job(tmp_path)
    with served(roifs_bin, task.config) as s:
        for path in ("/.roifs", "/.roifs/"):
            assert s.request(path)[0] == 404, path
        st, _, page = s.request("/?ls")
        assert st == 200 and b'id="n-done"' in page and b"files</a>" not in page
    tok = tmp_path / "token"
    tok.write_text("s3cret-token\n")
    os.chmod(tok, 0o600)
    args = ["--listings", "--token-file", tok, "--cors", "http://localhost:3000"]
    with served(roifs_bin, task.config, args) as s:
        ok = {"Authorization": "Bearer s3cret-token"}
        for path in ("/?ls", "/.roifs/", "/.roifs"):
            assert s.request(path)[0] == 401, path
            assert s.request(path, headers={"Authorization": "Bearer wrong"})[0] == 401, path
        assert s.request("/.roifs", headers=ok)[0] == 301
        assert listing(s, "/.roifs/", headers=ok) == ["status"]
        names = listing(s, "/?ls", headers=ok)
        chunks = [f"{i // 4}.{i % 4}" for i in range(12)]  # not 3.x: no ROI touches them
        assert sorted(names) == sorted([".zarray", ".zattrs", ".roifs/"] + chunks), names
        st, h, _ = s.request("/?ls", headers={**ok, "Origin": "http://localhost:3000"})
        assert st == 200 and h["access-control-allow-origin"] == "http://localhost:3000"
        assert json.loads(s.request("/.roifs/status", headers=ok)[2])["calls"] == 0


@pytest.mark.timeout(90)
def test_listings_of_a_plate(tmp_path, roifs_bin):
    """A served plate's listings name what a plate mount lists (every well and image, each
    image's labels and tables), computing nothing; a linked chunk serves the mount's bytes."""
    from test_plate import make_plate
    from test_serve_plate import config_of
    plate, _ = make_plate(tmp_path, "0.4", "fractal")
    rois = {"grid": "20,16"}
    mounts, served_cfg = config_of(tmp_path, "m", plate, rois), config_of(tmp_path, "s", plate, rois)
    with served(roifs_bin, served_cfg, ["--listings"]) as s:
        files, dirs, urls = walk_listings(s)
        assert "B/03/1/labels/seg/0/1.1" in files and "C/05/0/tables/seg_table" in dirs
        doc = json.loads(s.request("/.roifs/status")[2])
        assert doc["calls"] == 0 and doc["rois"]["done"] == 0, doc
        with mounted(roifs_bin, mounts) as m:
            assert (files, dirs) == tree_of(m.path)
            for rel in ("B/03/1/labels/seg/0/1.1", "C/05/.zattrs"):
                assert s.request(urls[rel])[2] == (m.path / rel).read_bytes(), rel
