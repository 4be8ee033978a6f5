"""`roifs serve` for the tests (docs/serve.md): a server on a free loopback port, stopped with
SIGTERM at the end (exit status 0 required), under the test's watchdog; and HTTP helpers."""
import contextlib
import http.client
import os
import re
import signal
import ssl
import subprocess
import time
from pathlib import Path

from conftest import watched


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
