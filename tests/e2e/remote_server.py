"""Servers for the remote-input tests (docs/remote.md), started by the tests on 127.0.0.1:
nginx (Debian's) serving a directory with no listing and a bearer token required, over http or
https (a CA and a server certificate made here with openssl), and FaultProxy, a fault-injecting
HTTP proxy in front of it: a deterministic schedule of statuses, delays, resets and short bodies
per object, a latency for every request, and the requests counted per object (and listed,
with their Range headers)."""
import contextlib
import http.client
import http.server
import os
import re
import shutil
import socket
import socketserver
import struct
import subprocess
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

TOKEN = "s3cr3t-t0ken-for-roifs-tests"

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log {work}/access.log;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    default_type application/octet-stream;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port} {listen};
        {tls}
        root {root};
        autoindex off;
        location / {{
            if ($http_authorization != "Bearer {token}") {{ return 401; }}
        }}
    }}
}}
"""


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


def make_ca(work):
    """work/ca.pem (a CA made now) and a certificate for 127.0.0.1 it signed: (ca, cert, key)."""
    work = Path(work)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True, timeout=30)
    run("req", "-x509", *ec, "-keyout", work / "ca.key", "-out", work / "ca.pem", "-days", "1",
        "-subj", "/CN=roifs test CA")
    run("req", *ec, "-keyout", work / "srv.key", "-out", work / "srv.csr", "-subj",
        "/CN=127.0.0.1")
    (work / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", work / "srv.csr", "-CA", work / "ca.pem", "-CAkey",
        work / "ca.key", "-CAcreateserial", "-out", work / "srv.pem", "-days", "1",
        "-extfile", work / "ext.cnf")
    return work / "ca.pem", work / "srv.pem", work / "srv.key"


@contextlib.contextmanager
def nginx(root, work, tls=False):
    """nginx serving root on 127.0.0.1 (token required, no listing); yields its base URL."""
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(exe):
        pytest.fail("nginx is not installed (scripts/install-deps.sh installs it)")
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    tls_conf, listen = "", ""
    if tls:
        _, cert, key = make_ca(work)
        tls_conf = f"ssl_certificate {cert}; ssl_certificate_key {key};"
        listen = "ssl http2"
    conf = work / "nginx.conf"
    conf.write_text(NGINX_CONF.format(work=work, port=port, root=root, token=TOKEN,
                                      tls=tls_conf, listen=listen))
    proc = subprocess.Popen([exe, "-p", str(work), "-e", str(work / "error.log"), "-c",
                             str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not wait_port(port, proc):
            err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None else ""
            pytest.fail(f"nginx did not start: {err}")
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def headers_file(path, mode=0o600):
    """A headers_file with the test token, of mode mode."""
    path = Path(path)
    path.write_text(f"# the data server's token\nAuthorization: Bearer {TOKEN}\n")
    os.chmod(path, mode)
    return path


class FaultProxy:
    """An HTTP/1.1 proxy (keep-alive) in front of upstream (http://127.0.0.1:PORT).

    schedule(pattern, *actions): the next requests whose path matches regex pattern get the
    actions in order, one each ("500", "404", "403": that status; "reset": the connection
    closed without an answer; "short": the answer's headers and half its body; "delay:S": S
    seconds, then the answer; "ok"), then the upstream's answers. latency: seconds before every
    answer. counts[(method, path)]: requests seen; connections: TCP connections accepted."""

    def __init__(self, upstream, latency=0.0):
        self.upstream = upstream.split("://", 1)[1]
        self.latency = latency
        self.counts = Counter()
        self.requests = []  # (method, path, Range header or None), in order
        self.conditional = 0  # requests with If-None-Match
        self.connections = 0  # TCP connections accepted
        self.in_flight = self.max_in_flight = 0  # requests being answered, and the most at once
        self.actions = defaultdict(list)
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                with proxy.lock:
                    proxy.connections += 1

            def do_GET(self):
                proxy._serve(self, "GET")

            def do_HEAD(self):
                proxy._serve(self, "HEAD")

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def schedule(self, pattern, *actions, method=None):
        """method: only requests of that method (GET, HEAD) take the actions."""
        with self.lock:
            self.actions[(pattern, method)].extend(actions)

    def clear(self):
        """No more scheduled faults: every request gets the upstream's answer."""
        with self.lock:
            self.actions.clear()

    def count(self, pattern, method=None):
        with self.lock:
            return sum(n for (m, p), n in self.counts.items()
                       if re.search(pattern, p) and (method is None or m == method))

    def _next_action(self, method, path):
        with self.lock:
            for (pattern, m), acts in self.actions.items():
                if acts and re.search(pattern, path) and m in (None, method):
                    return acts.pop(0)
        return "ok"

    def _serve(self, h, method):
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._answer(h, method)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _answer(self, h, method):
        with self.lock:
            self.counts[(method, h.path)] += 1
            self.requests.append((method, h.path, h.headers.get("Range")))
            self.conditional += "If-None-Match" in h.headers
        action = self._next_action(method, h.path)
        if self.latency:
            time.sleep(self.latency)
        if action.startswith("delay:"):
            time.sleep(float(action[6:]))
            action = "ok"
        if action == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            return
        if action.isdigit():
            h.send_response(int(action))
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        conn = http.client.HTTPConnection(self.upstream, timeout=30)
        fwd = {k: v for k, v in h.headers.items()
               if k.lower() in ("authorization", "range", "if-none-match", "if-modified-since")}
        conn.request(method, h.path, headers=fwd)
        r = conn.getresponse()
        body = r.read()
        conn.close()
        h.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() in ("etag", "last-modified", "content-range", "content-length",
                             "content-type", "accept-ranges"):
                h.send_header(k, v)
        h.end_headers()
        if method == "HEAD":
            return
        if action == "short":
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            return
        h.wfile.write(body)
