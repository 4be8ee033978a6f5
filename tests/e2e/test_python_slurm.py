"""[process] python with executor = slurm (docs/processors.md): the file is checked locally at
start, then each interpreter runs as a Slurm job step like a worker, serving the function with
the `python =` conventions (read-only block, roi.label, results cast like the builtins)."""
import json

import numpy as np
import zarr

from conftest import line_of, run_roifs
from test_slurm import (_nothing_left_on_the_cluster, runs, slurm_cluster,  # noqa: F401
                        slurm_task, ROIS, SHAPE)

FUNC = """\
import json, os
import numpy as np

def f(block, roi):
    env = os.environ
    with open("runs.txt", "a") as out:
        out.write(json.dumps({"roi": roi.index, "job": env.get("SLURM_JOB_ID"),
                              "step": env.get("SLURM_STEP_ID"), "label": roi.label,
                              "writeable": block.flags.writeable}) + "\\n")
    return block * 2.0 + 0.5   # float64: rounded half to even into the output dtype
"""


def test_python_steps(tmp_path, mount):
    task, _ = slurm_task(tmp_path, {"python": "pyf.py:f"})
    (tmp_path / "pyf.py").write_text(FUNC)
    inp = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
    want = np.zeros(SHAPE, inp.dtype)
    for roi in ROIS:
        sl = tuple(slice(a, b) for a, b in roi)
        want[sl] = np.rint(inp[sl] * 2.0 + 0.5)
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[:], want)
        assert m.status()["rois"]["failed"] == 0
    recs = runs(task)
    assert sorted(r["roi"] for r in recs) == list(range(len(ROIS)))
    assert all(r["job"] and r["step"] is not None for r in recs), recs
    assert all(r["label"] is None and r["writeable"] is False for r in recs), recs


def test_python_start_error_checked_locally(tmp_path, roifs_bin):
    task, _ = slurm_task(tmp_path, {"python": "pyf.py:f"})
    (tmp_path / "pyf.py").write_text("def f(block):\n    return block\n")
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 2, r
    assert f"{task.config}:{line_of(task.config, '^python =')}: [process] python: f(block) " \
           "cannot be called as f(block, roi)" in r.stderr, r.stderr
