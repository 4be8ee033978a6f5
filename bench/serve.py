"""roifs serve under load: wrk (Debian's), 64 connections for DURATION s (default 20) over the
warm chunks of a computed array, side by side with nginx serving the FUSE mount of the same
job and nginx serving a plain folder of the same chunk files (`roifs export` of the job).

The array: 2048x2048 uint16 (a smooth image with noise), chunks 256x256 (64 chunk files),
blosc lz4, builtin copy over one ROI per chunk, computed by `roifs warm` first. wrk asks for
the chunk files in turn (a Lua script cycling over their URLs), 2 threads, 64 connections,
keep-alive. nginx: as shipped by Debian, `worker_processes auto` (one per CPU), run as root
(the mount is the benchmark's own, without allow_other), access log off, sendfile on.
roifs serve: its defaults (8 server threads). The three are run in turn, REPS times (default
3), rotating the order.

Reported: requests/s and p99 latency (medians over the repeats) and their ratios; targets
(issue 36): roifs serve >= nginx over the FUSE mount (requests/s, and p99 no worse), and >= 0.5x
nginx over the plain folder."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import zarr
from numcodecs import Blosc

import common as C

REPS = int(os.environ.get("REPS", 3))
DURATION = int(os.environ.get("DURATION", 20))
CONNECTIONS = 64
SHAPE, CHUNK = (2048, 2048), (256, 256)

NGINX_CONF = """daemon off;
user root;
worker_processes auto;
pid {work}/nginx.pid;
error_log {work}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ }}
    }}
}}
"""

LUA = """local paths = {%s}
local i = 0
request = function()
  i = i %% #paths + 1
  return wrk.format("GET", paths[i])
end
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what):
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.02)


def wrk(port, lua):
    """(requests/s, p99 ms) of one wrk run."""
    out = subprocess.run(["wrk", "-t2", f"-c{CONNECTIONS}", f"-d{DURATION}s", "--latency",
                          "-s", str(lua), f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=DURATION + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    return {"rps": rps, "p99_ms": p99}


def nginx_case(root, work, lua):
    def run():
        port = free_port()
        conf = work / "nginx.conf"
        conf.write_text(NGINX_CONF.format(work=work, port=port, root=root))
        p = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-p", str(work), "-e",
                              str(work / "error.log"), "-c", str(conf)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port, p, "nginx")
            return wrk(port, lua)
        finally:
            p.send_signal(signal.SIGQUIT)
            p.wait(30)
    return run


def serve_case(config, lua):
    def run():
        port = free_port()
        p = subprocess.Popen([C.ROIFS, "serve", "--listen", f"127.0.0.1:{port}", str(config)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port, p, "roifs serve")
            return wrk(port, lua)
        finally:
            p.send_signal(signal.SIGTERM)
            if p.wait(30) != 0:
                raise RuntimeError(f"roifs serve exited {p.returncode}")
    return run


def main():
    info = C.machine()
    with C.scratch("serve") as d:
        rng = np.random.default_rng(36)
        yy, xx = np.mgrid[0:SHAPE[0], 0:SHAPE[1]]
        data = ((np.sin(yy / 97.0) + np.cos(xx / 71.0) + 2) * 8000
                + rng.integers(0, 500, SHAPE)).astype("<u2")
        z = zarr.open(str(d / "in.zarr"), mode="w", shape=SHAPE, chunks=CHUNK, dtype="<u2",
                      compressor=Blosc("lz4", 5, Blosc.SHUFFLE))
        z[...] = data
        rois = [((y, y + CHUNK[0]), (x, x + CHUNK[1]))
                for y in range(0, SHAPE[0], CHUNK[0]) for x in range(0, SHAPE[1], CHUNK[1])]
        C.write_rois(d / "rois.txt", rois)
        config = d / "task.ini"
        C.write_config(config, {"input": {"path": d / "in.zarr"}, "rois": {"file": "rois.txt"},
                                "process": {"builtin": "copy"},
                                "output": {"compressor": "blosc", "cname": "lz4",
                                           "clevel": 5, "shuffle": "shuffle"},
                                "cache": {"dir": d / "cache"}})
        subprocess.run([C.ROIFS, "warm", str(config)], check=True, capture_output=True)
        plain = d / "plain"
        subprocess.run([C.ROIFS, "export", str(config), str(plain)], check=True,
                       capture_output=True)
        names = sorted(p.name for p in plain.iterdir() if not p.name.startswith("."))
        lua = d / "chunks.lua"
        lua.write_text(LUA % ", ".join(f'"/{n}"' for n in names))
        work = d / "nginx"
        work.mkdir()
        mnt = d / "mnt"
        C.log(f"{len(names)} chunk files, {DURATION} s x {REPS} per case")
        with C.Mount(config, mnt) as m:
            for n in names:  # every chunk opened once: the mount's cache files are current
                (m.mnt / n).read_bytes()
            cases = {"roifs serve": serve_case(config, lua),
                     "nginx over the FUSE mount": nginx_case(mnt, work, lua),
                     "nginx over a plain folder": nginx_case(plain, work, lua)}
            res = C.interleaved(REPS, cases)
    med = {k: {q: C.median([r[q] for r in v]) for q in ("rps", "p99_ms")}
           for k, v in res.items()}
    s, fuse, plain_ = med["roifs serve"], med["nginx over the FUSE mount"], \
        med["nginx over a plain folder"]
    rows = [[k, f"{v['rps']:.0f}", f"{v['p99_ms']:.2f}",
             f"{s['rps'] / v['rps']:.2f}x", f"{v['p99_ms'] / s['p99_ms']:.2f}x"]
            for k, v in med.items()]
    table = C.md_table(["server", "requests/s", "p99 ms", "roifs serve's req/s ratio",
                        "its p99 ratio (theirs / serve's)"], rows)
    summary = [
        {"scenario": "req/s vs nginx over the FUSE mount", "roifs": f"{s['rps']:.0f}",
         "alternative": f"{fuse['rps']:.0f}", "ratio": f"{s['rps'] / fuse['rps']:.2f}",
         "target": ">= 1.0", "met": s["rps"] >= fuse["rps"]},
        {"scenario": "p99 vs nginx over the FUSE mount", "roifs": f"{s['p99_ms']:.2f} ms",
         "alternative": f"{fuse['p99_ms']:.2f} ms",
         "ratio": f"{fuse['p99_ms'] / s['p99_ms']:.2f}", "target": ">= 1.0",
         "met": s["p99_ms"] <= fuse["p99_ms"]},
        {"scenario": "req/s vs nginx over a plain folder", "roifs": f"{s['rps']:.0f}",
         "alternative": f"{plain_['rps']:.0f}", "ratio": f"{s['rps'] / plain_['rps']:.2f}",
         "target": ">= 0.5", "met": s["rps"] >= 0.5 * plain_["rps"]},
    ]
    md = (f"wrk -t2 -c{CONNECTIONS} -d{DURATION}s over the {len(names)} warm chunk files of a "
          f"2048x2048 uint16 array (256x256 chunks, blosc lz4), medians of {REPS} runs each, "
          f"interleaved.\n\n{table}\n")
    C.log(md)
    C.save("serve", "roifs serve under load (wrk)", summary, md, res, info)


if __name__ == "__main__":
    main()
