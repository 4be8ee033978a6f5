"""executor = slurm (docs/configuration.md, docs/operations.md#computing-on-a-slurm-cluster):
command and worker processors run as job steps of a real single-node Slurm cluster
(tests/slurm/start.sh starts it: Debian's slurm-wlm and munge, as root). The results are read with
zarr-python and compared with numpy; the processes record $SLURM_JOB_ID / $SLURM_STEP_ID to show
where they ran; a failed step's reason reaches the status file; an unmount cancels the steps that
still run."""
import contextlib
import errno
import json
import os
import subprocess
import time

import numpy as np
import pytest
import zarr

from conftest import PY, REPO, line_of, make_task, mounted, read_bytes, run_roifs

START = REPO / "tests" / "slurm" / "start.sh"

SHAPE, CHUNKS = (10, 12), (4, 5)
# Overlapping boxes (later ones win), spanning chunks.
ROIS = [((0, 4), (0, 6)), ((2, 7), (3, 12)), ((5, 10), (0, 5)), ((0, 10), (9, 12)),
        ((6, 9), (4, 8))]

# Records where it ran (cwd: the configuration's directory) and computes 2 * in + roi.
COMMAND = """\
import json, os, sys, numpy as np
env = os.environ
with open("runs.txt", "a") as f:
    f.write(json.dumps({"roi": int(env["ROIFS_ROI"]), "job": env.get("SLURM_JOB_ID"),
                        "step": env.get("SLURM_STEP_ID"), "name": env.get("SLURM_JOB_NAME"),
                        "extra": env.get("ROIFS_TEST_EXTRA"), "cwd": os.getcwd()}) + "\\n")
shape = [int(v) for v in env["ROIFS_IN_SHAPE"].split(",")]
a = np.frombuffer(sys.stdin.buffer.read(), env["ROIFS_IN_DTYPE"]).reshape(shape)
sys.stdout.buffer.write((2 * a + int(env["ROIFS_ROI"])).astype(env["ROIFS_OUT_DTYPE"]).tobytes())
"""

WORKER = """\
import json, os
from roifs_worker import run

def process(block, roi):
    env = os.environ
    with open("runs.txt", "a") as f:
        f.write(json.dumps({"roi": roi.index, "job": env.get("SLURM_JOB_ID"),
                            "step": env.get("SLURM_STEP_ID"), "name": env.get("SLURM_JOB_NAME"),
                            "pid": os.getpid(), "cwd": os.getcwd()}) + "\\n")
    return (2 * block + roi.index).astype(roi.out_dtype)

run(process)
"""


@pytest.fixture(scope="session")
def slurm_cluster():
    if os.geteuid() != 0 and subprocess.run(["sh", "-c", "command -v sinfo"],
                                            capture_output=True).returncode != 0:
        pytest.skip("the Slurm tests need root (tests/slurm/start.sh installs and starts it)")
    t0 = time.monotonic()
    r = subprocess.run([str(START)], capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"tests/slurm/start.sh failed:\n{r.stdout}\n{r.stderr}"
    print(f"slurm cluster ready in {time.monotonic() - t0:.1f} s")


ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED"}


def roifs_jobs(base):
    """Steps and waiting or running jobs of roifs started from base (the test's directory, the
    steps' working directory): ['12.0|roifs-roi-3', '12|roifs-roi-3', ...]. Other test runs
    on the same cluster do not count."""
    def squeue(*args):
        return subprocess.run(["squeue", "-h", *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout.split("\n")
    base = str(base)
    mine, out = set(), []
    for line in squeue("-t", "all", "-o", "%i|%j|%T|%Z"):
        job, name, state, wd = (line.split("|", 3) + ["", "", ""])[:4]
        if name.startswith("roifs-") and (wd == base or wd.startswith(base + "/")):
            mine.add(job)
            if state in ACTIVE:
                out.append(f"{job}|{name}")
    steps = [l for l in squeue("-s", "-o", "%i|%j") if l.partition(".")[0] in mine]
    return steps + out


def wait_no_jobs(base, timeout):
    deadline = time.monotonic() + timeout
    while (left := roifs_jobs(base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture(autouse=True)
def _nothing_left_on_the_cluster(slurm_cluster, tmp_path):
    yield
    left = wait_no_jobs(tmp_path, 10)
    assert not left, f"roifs jobs left on the cluster after the test: {left}"


def slurm_task(tmp_path, process, slurm=None, rois=ROIS):
    (tmp_path / "f.py").write_text(COMMAND)
    (tmp_path / "w.py").write_text(WORKER)
    inp = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
    task = make_task(tmp_path, inp, CHUNKS, rois=rois, output={"compressor": "none"},
                     process={"executor": "slurm", "threads": 2, **process},
                     sections={"slurm": {"partition": "debug", "cpus_per_task": 1,
                                         **(slurm or {})}})
    want = np.zeros(SHAPE, "<i4")
    for i, roi in enumerate(rois):
        sl = tuple(slice(a, b) for a, b in roi)
        want[sl] = 2 * inp[sl] + i
    return task, want


def runs(task):
    path = task.dir / "runs.txt"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def test_command_steps(tmp_path, mount):
    task, want = slurm_task(
        tmp_path, {"command": f"{PY} f.py"},
        # quoted words in extra: the task sees the value with its space
        {"time": "5", "mem": "100M", "extra": '--export="ALL,ROIFS_TEST_EXTRA=two words"'})
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
        st = m.status()
        assert st["calls"] == len(ROIS) and st["rois"]["done"] == len(ROIS), st
    got = runs(task)
    assert sorted(r["roi"] for r in got) == list(range(len(ROIS))), got  # each ROI once
    for r in got:  # each ROI a job step of its own job, named after it, in the config's dir
        assert r["job"] and r["step"] == "0" and r["name"] == f"roifs-roi-{r['roi']}", r
        assert r["extra"] == "two words" and r["cwd"] == str(task.dir), r
    assert len({r["job"] for r in got}) == len(ROIS), got


def test_worker_steps(tmp_path, mount):
    # timeout: a reply stuck in srun (its stdout must be unbuffered) fails fast
    task, want = slurm_task(tmp_path, {"worker": f"{PY} w.py", "timeout": 20})
    with mount(task.config) as m:
        np.testing.assert_array_equal(zarr.open(str(m.path), mode="r")[...], want)
        st = m.status()
        assert st["calls"] == len(ROIS) and st["rois"]["done"] == len(ROIS), st
        assert len(roifs_jobs(tmp_path)) >= 1  # the workers stay up as steps until the unmount
    got = runs(task)
    assert sorted(r["roi"] for r in got) == list(range(len(ROIS))), got
    for r in got:
        assert r["job"] and r["step"] == "0" and r["name"] == "roifs-worker", r
        assert r["cwd"] == str(task.dir), r
    # at most one worker step per thread, each serving several ROIs
    assert len({r["job"] for r in got}) <= 2 and len({r["pid"] for r in got}) <= 2, got


def status_errors(m):
    return [e["message"] for e in m.status()["errors"]]


@pytest.mark.parametrize("case", ["exit", "partition", "worker"])
def test_failed_step_reason(tmp_path, mount, case):
    rois = [((0, 4), (0, 5))]
    if case == "exit":
        (tmp_path / "fail.sh").write_text("echo 'ValueError: bad roi' >&2; exit 3\n")
        process, slurm, want = {"command": "sh fail.sh"}, None, [
            "exit status 3: ValueError: bad roi"]
    elif case == "partition":
        process, slurm, want = {"command": f"{PY} f.py"}, {"partition": "nosuch"}, [
            "exit status 1: srun: error: ", "Invalid partition name specified"]
    else:
        (tmp_path / "die.sh").write_text("read line; echo 'worker gave up' >&2; exit 4\n")
        process, slurm, want = {"worker": "sh die.sh"}, None, [
            "exited with status 4 before replying: worker gave up"]
    task, _ = slurm_task(tmp_path, process, slurm, rois=rois)
    with mount(task.config) as m:
        with pytest.raises(OSError) as e:
            read_bytes(m / "0.0")
        assert e.value.errno == errno.EIO
        errors = status_errors(m)
        assert errors and all(w in errors[-1] for w in want), errors
        assert m.status()["rois"]["failed"] == 1


def test_unmount_cancels_steps(tmp_path, mount):
    # ROI 0 is quick and computed by a first mount. A second one serves it from the cache and
    # reads ahead ROIs 1-3, which sleep: two run as steps (2 CPUs), the third waits for
    # resources. Its unmount must end the steps and withdraw the waiting job.
    (tmp_path / "slow.sh").write_text(
        'echo "$SLURM_JOB_ID.$SLURM_STEP_ID" >> started.txt\n'
        '[ "$ROIFS_ROI" = 0 ] || exec sleep 60\n'  # exec: see test_kill_9_ends_steps
        'head -c $((4 * 4 * 5)) /dev/zero\n')
    rois = [((0, 4), (0, 5)), ((0, 4), (5, 10)), ((4, 8), (0, 5)), ((4, 8), (5, 10))]
    task, _ = slurm_task(tmp_path, {"command": "exec sh slow.sh", "threads": 1, "readahead": 0},
                         rois=rois)
    started = tmp_path / "started.txt"
    with mount(task.config) as m:
        assert read_bytes(m / "0.0") == bytes(80)
    text = task.config.read_text()
    task.config.write_text(text.replace("threads = 1", "threads = 3")
                           .replace("readahead = 0", "readahead = 3"))
    with mount(task.config) as m:
        assert read_bytes(m / "0.0") == bytes(80)  # from the cache
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            jobs = roifs_jobs(tmp_path)
            steps = [j for j in jobs if "." in j.partition("|")[0]]
            # 2 steps, their 2 jobs, 1 pending job, and both steps' scripts started (a step
            # shows in squeue before its task runs)
            if (len(steps) == 2 and len(jobs) == 5 and started.exists()
                    and len(started.read_text().split()) == 3):
                break
            time.sleep(0.1)
        assert len(steps) == 2 and len(jobs) == 5, jobs
        t0 = time.monotonic()
    unmounted = time.monotonic() - t0
    left = wait_no_jobs(tmp_path, 5)
    assert not left, f"still on the cluster {unmounted + 5:.1f} s after the unmount: {left}"
    assert unmounted < 10, f"the unmount took {unmounted:.1f} s"
    assert len(started.read_text().split()) == 3  # ROI 0 and the two that ran
    assert "did not stop" not in m.log_text()  # srun stopped on SIGTERM, nothing was killed


def test_kill_9_ends_steps(tmp_path, roifs_bin):
    # Issue 14.2: `roifs warm` killed with SIGKILL while its ROIs run as job steps (or wait for
    # an allocation, when other tests hold the cluster's CPUs): srun gets SIGTERM when roifs
    # dies (PR_SET_PDEATHSIG) and ends its step or withdraws its job.
    # One process per task (exec): the cluster's proctrack/linuxproc loses track of a task's
    # children once the task's shell is gone, and the step would wait for them.
    (tmp_path / "slow.sh").write_text('exec sleep 120\n')
    rois = [((0, 4), (0, 5)), ((4, 8), (5, 10))]
    task, _ = slurm_task(tmp_path, {"command": "exec sh slow.sh", "threads": 2}, rois=rois)
    proc = subprocess.Popen([roifs_bin, "warm", str(task.config)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            steps = [j for j in roifs_jobs(tmp_path) if "." in j.partition("|")[0]]
            if steps:
                break
            time.sleep(0.1)
        assert steps, roifs_jobs(tmp_path)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    left = wait_no_jobs(tmp_path, 20)
    assert not left, f"still on the cluster 20 s after kill -9 of roifs warm: {left}"


def test_two_mounts_share_one_cache(tmp_path, roifs_bin):
    # Two mounts of one configuration (as on two hosts sharing the cache directory) read at
    # the same time: each ROI still runs once, on the cluster.
    task, want = slurm_task(tmp_path, {"command": f"{PY} f.py"})
    with contextlib.ExitStack() as stack:
        ms = [stack.enter_context(mounted(roifs_bin, task.config, tmp_path / f"mnt{i}"))
              for i in range(2)]
        procs = [subprocess.Popen([PY, "-c", "import sys, zarr, numpy as np; "
                                   "np.save(sys.argv[2], zarr.open(sys.argv[1], mode='r')[...])",
                                   str(m.path), str(tmp_path / f"read{i}.npy")])
                 for i, m in enumerate(ms)]
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
        for i in range(2):
            np.testing.assert_array_equal(np.load(tmp_path / f"read{i}.npy"), want)
        calls = [m.status()["calls"] for m in ms]
    assert sum(calls) == len(ROIS), calls
    assert sorted(r["roi"] for r in runs(task)) == list(range(len(ROIS)))


def test_bad_extra_refused(tmp_path, roifs_bin):
    task, _ = slurm_task(tmp_path, {"command": f"{PY} f.py"},
                         {"extra": "--comment='not closed"})
    line = line_of(task.config, r"^extra")
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 2, r
    assert (f"roifs: {task.config}:{line}: [slurm] extra: unterminated ' quote"
            in r.stderr), r.stderr
