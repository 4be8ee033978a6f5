"""`roifs serve` for the tests (docs/serve.md): a server on a free loopback port, stopped with
SIGTERM at the end (exit status 0 required), under the test's watchdog; and HTTP helpers."""
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

from conftest import wait_for, watched


class Served:
    def __init__(self, proc, log, host, port, scheme):
        self.proc, self.log, self.host, self.port, self.scheme = proc, Path(log), host, port, scheme
        self.url = f"{scheme}://{host}:{port}"

    def log_text(self):
        return self.log.read_text(errors="replace")[-4000:]

    def conn(self, timeout=10):
        if self.scheme == "https":
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, path, method="GET", headers=None, timeout=10):
        """(status, headers dict with lower-case names, body bytes) of one request."""
        c = self.conn(timeout)
        try:
            c.request(method, path, headers=headers or {})
            r = c.getresponse()
            body = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body
        finally:
            c.close()


@contextlib.contextmanager
def served(roifs_bin, config, args=(), ready_timeout=30, checked=True):
    """roifs serve --listen 127.0.0.1:0 ARGS CONFIG; yields a Served once it listens."""
    config = Path(config)
    log = config.parent / f"serve-{os.getpid()}-{time.monotonic_ns()}.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen([roifs_bin, "serve", "--listen", "127.0.0.1:0", *map(str, args),
                                 str(config)], stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd="/", start_new_session=True)
    with watched(proc, config.parent / "no-mount"):
        try:
            deadline = time.monotonic() + ready_timeout
            while True:
                m = re.search(r"serving (https?)://([0-9.]+):(\d+)/", log.read_text())
                if m:
                    break
                if proc.poll() is not None:
                    raise AssertionError(f"roifs serve exited {proc.returncode}: "
                                         f"{log.read_text()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"roifs serve not listening: {log.read_text()}")
                time.sleep(0.02)
            s = Served(proc, log, m.group(2), int(m.group(3)), m.group(1))
            yield s
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
                raise AssertionError("roifs serve did not stop within 15 s of SIGTERM")
    if checked:
        assert rc == 0, f"roifs serve exited {rc}: {log.read_text()[-2000:]}"


def http_status(s):
    """The status document's "http" section (requests, waiting, gone, held)."""
    return json.loads(s.request("/.roifs/status", timeout=5)[2])["http"]


def wait_then_hang_up(s, paths, started, timeout):
    """GET of each of paths on a connection of its own, each in turn until the server holds it
    waiting (`http.waiting` counts it) and started() is true (within timeout seconds); the
    engines must then owe an answer to every one (`http.held`). Then every client hangs up,
    and this waits (10 s at most) until the server has let them all go (`http.waiting` 0).
    Returns the "http" section then."""
    socks = []
    try:
        for path in paths:
            c = socket.create_connection((s.host, s.port), timeout=5)
            c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            socks.append(c)
            wait_for(lambda: http_status(s)["waiting"] == len(socks) and started(), timeout,
                     "the requests to wait")
        assert http_status(s)["held"] == len(paths)
    finally:
        for c in socks:
            c.close()
    wait_for(lambda: http_status(s)["waiting"] == 0, 10, "the server to let the clients go")
    return http_status(s)
