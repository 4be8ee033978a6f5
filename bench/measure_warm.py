"""[measure] (docs/measurements.md): the feature table's first read after `roifs warm`, this
roifs side by side with an earlier one (b843d25, before the partials were made with the chunks;
$ROIFS_BASELINE names a build of it, else it is built in a temporary worktree).

Input and labels as bench/measure.py: 4 channels 4096x4096 uint16, ~20,000 objects, 16 label
chunks of 1024x1024 (ids = unique). Each repeat and binary: a fresh cache, `roifs warm` (timed
apart: it now also measures each label chunk while it is in memory), then a mount whose first
read of the table is timed; its status says how many label chunks the table read (measure.pieces:
16 before, 0 now) and how many partials it took from their records. Tables compared equal."""
import os
import subprocess
import time

import numpy as np

import common as C
from measure import CH, make_segmentation, read_table

REPS = int(os.environ.get("REPS", 3))


def main():
    info = C.machine()
    with C.binary_at("b843d25", "ROIFS_BASELINE") as base, C.scratch("measure_warm") as d:
        cfg = make_segmentation(d)
        out, warm = {}, {"now": [], "before": []}

        def run(name, binary):
            C.rmtree(d / "cache")
            t0 = time.perf_counter()
            subprocess.run([binary, "warm", str(cfg)], check=True, capture_output=True)
            warm[name].append(time.perf_counter() - t0)
            with C.Mount(cfg, d / "mnt", binary=binary) as m:
                t0 = time.perf_counter()
                (m.mnt / "tables" / "feat" / "X" / "0.0").read_bytes()
                t = time.perf_counter() - t0
                st = m.status()
                out[name] = read_table(m)
            assert st["calls"] == 0, st
            out[name + "_pieces"] = (st["measure"]["pieces"], st["measure"]["pieces_from_record"])
            return t

        res = C.interleaved(REPS, {"now": lambda: run("now", C.ROIFS),
                                   "before": lambda: run("before", base)})
        for a, b in zip(out["now"], out["before"]):
            if isinstance(a, np.ndarray):  # partials merged in another order: 1e-12
                np.testing.assert_allclose(a, b, rtol=1e-12)
            else:
                assert a == b
    assert out["now_pieces"] == (0, 16) and out["before_pieces"] == (16, 0), out
    now, before = C.median(res["now"]), C.median(res["before"])
    wn, wb = C.median(warm["now"]), C.median(warm["before"])
    rows = [C.time_row("table's first read after warm, this roifs (0 label chunks read)",
                       res["now"], f"{now / before:.2f}×"),
            C.time_row("table's first read after warm, b843d25 (16 label chunks read)",
                       res["before"], "1×"),
            C.time_row("roifs warm, this roifs (partials made with the chunks)", warm["now"],
                       f"{wn / wb:.2f}×"),
            C.time_row("roifs warm, b843d25", warm["before"], "1×")]
    md = (f"{REPS} repeats, interleaved; medians. 4096×4096, 4 channels uint16, chunks "
          f"{CH}×{CH}, builtin label, ids = unique; a fresh cache and `roifs warm` before each "
          f"mount. Tables equal.\n\n" +
          C.md_table(["what", "median (s)", "range (s)", "/ b843d25"], rows))
    summary = [{"scenario": "feature table's first read after roifs warm (16 label chunks)",
                "roifs": f"{now:.3f} s (warm {wn:.2f} s)",
                "alternative": f"b843d25 {before:.3f} s (warm {wb:.2f} s)",
                "ratio": f"{now / before:.2f}×", "target": "no label chunk read",
                "met": out["now_pieces"][0] == 0}]
    C.save("measure_warm", "Feature table after warm", summary, md,
           {"now_s": res["now"], "before_s": res["before"], "warm_now_s": warm["now"],
            "warm_before_s": warm["before"]}, info)
    print(md)


if __name__ == "__main__":
    main()
