"""Remote input latency (docs/remote.md, Latency; issue 37 item 5): a cold read of 256 input
chunks by 256 one-chunk ROIs (builtin add, 16x16 chunks of 32x32 uint16, blosc lz4), the input
served by nginx on 127.0.0.1 (a token required) through the tests' FaultProxy with 20 ms of
latency per request, `connections = 8` against `connections = 1`, each against the same read
with no latency (`threads = 8` in every case; fresh cache each time). Target: the latency adds
at most 256 / connections x 20 ms x 2 to the read without latency."""
import os

import numpy as np

import common as C
from remote_server import FaultProxy, headers_file, nginx

REPS = int(os.environ.get("REPS", 3))
N, CH = 512, 32
LAT = 0.020


def main():
    info = C.machine()
    with C.scratch("remote_latency") as d:
        data = C.random_input(d / "in.zarr", (N, N), (CH, CH), 0)
        expected = data + 1
        rois = C.tiles((N, N), CH)
        assert len(rois) == 256
        C.write_rois(d / "rois.txt", rois)
        hf = headers_file(d / "headers")
        res = {}
        with nginx(d, d / "nginx") as base, FaultProxy(base) as slow, \
                FaultProxy(base) as fast:
            slow.latency = LAT

            def case(proxy, conn):
                cfg = C.write_config(d / f"task_{conn}_{proxy.latency}.ini", {
                    "input": {"path": f"{proxy.url}/in.zarr", "headers_file": hf,
                              "connections": conn},
                    "rois": {"file": d / "rois.txt"},
                    "process": {"builtin": "add", "param.value": 1, "threads": 8},
                    "cache": {"dir": d / "cache"}})
                return lambda: C.cold_read(cfg, d, len(rois), expected)["read_s"]

            res = C.interleaved(REPS, {"1 conn, no latency": case(fast, 1),
                                       "1 conn, 20 ms": case(slow, 1),
                                       "8 conn, no latency": case(fast, 8),
                                       "8 conn, 20 ms": case(slow, 8)})
    med = {k: C.median(v) for k, v in res.items()}
    extra = {c: med[f"{c} conn, 20 ms"] - med[f"{c} conn, no latency"] for c in (1, 8)}
    bound = {c: 256 / c * LAT * 2 for c in (1, 8)}
    rows = [C.time_row(k, v, f"{med['1 conn, 20 ms'] / med[k]:.1f}×") for k, v in res.items()]
    md = (f"{REPS} repeats, interleaved; medians. 256 one-chunk ROIs over {N}×{N} uint16 in "
          f"{CH}×{CH} chunks (blosc lz4), builtin add, threads = 8, cold read with zarr-python "
          f"through the mount; nginx on 127.0.0.1 behind the tests' FaultProxy (Python), "
          f"{LAT * 1000:.0f} ms added per request. Latency cost (read with latency minus read "
          f"without): connections = 1: {extra[1]:.2f} s (bound {bound[1]:.2f} s); "
          f"connections = 8: {extra[8]:.2f} s (bound {bound[8]:.2f} s); "
          f"{extra[1] / max(extra[8], 1e-9):.1f}× less with 8.\n\n" +
          C.md_table(["case", "median (s)", "range (s)", "vs 1 conn, 20 ms"], rows))
    summary = [{"scenario": "256 one-chunk ROIs, remote input, 20 ms per request",
                "roifs": f"connections 8: +{extra[8]:.2f} s", "alternative":
                f"connections 1: +{extra[1]:.2f} s", "ratio": f"{extra[1] / extra[8]:.1f}×",
                "target": f"≤ +{bound[8]:.2f} s", "met": extra[8] <= bound[8]}]
    C.save("remote_latency", "Remote input: latency hidden by connections", summary, md,
           {k: list(v) for k, v in res.items()}, info)
    print(md)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
