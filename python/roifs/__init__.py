"""roifs from Python: `roifs.mounted(CONFIG)` mounts a task for the length of a `with` block, and
`roifs.worker` runs a function as a `worker` processor (docs/processors.md: The worker protocol,
Python functions).

    import roifs, zarr

    with roifs.mounted("task.ini") as path:
        labels = zarr.open(path, mode="r")[:]

Importing roifs imports nothing else (numpy comes with roifs.worker), so that roifs's fork
server can limit numpy's thread pools before numpy loads.
"""

import contextlib
import os
import shutil
import subprocess
import tempfile
import time

__all__ = ["mounted", "MountError", "roifs_binary"]

# Set by roifs's fork server while it imports a `python =` file: roifs.worker.run() then
# returns at once, so that a worker script also serves as a `python =` file.
_in_fork_server = False


class MountError(RuntimeError):
    """`roifs mount` failed; the message is roifs's own ("roifs: task.ini:7: ...")."""

    def __init__(self, message, returncode=None):
        super().__init__(message)
        self.returncode = returncode


def roifs_binary():
    """The roifs program: $ROIFS_BIN, else the one installed with this package, else the
    first roifs on PATH."""
    env = os.environ.get("ROIFS_BIN")
    if env:
        return env
    try:
        from roifs._install import BINARY
    except ImportError:  # a source tree: not installed
        BINARY = None
    if BINARY and os.access(BINARY, os.X_OK):
        return BINARY
    found = shutil.which("roifs")
    if not found:
        raise MountError("roifs: the roifs program is not installed here; set ROIFS_BIN")
    return found


def _daemon_pid(mnt):
    """The roifs process serving mnt, found by its command line (None when gone)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")[:-1]
        except OSError:
            continue
        if len(args) >= 4 and b"mount" in args and args[-1] == os.fsencode(mnt) and \
                b"roifs" in os.path.basename(args[0]):
            return int(name)
    return None


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _unmount(binary, mnt, pid, timeout):
    """Unmounts (roifs unmount, then fusermount3 -u, then a lazy unmount) and waits for the
    daemon to exit, so that its interpreters are gone too."""
    for cmd in ([binary, "unmount", mnt], ["fusermount3", "-u", mnt], ["fusermount3", "-uz", mnt]):
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            break
    deadline = time.monotonic() + timeout
    while pid and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


@contextlib.contextmanager
def mounted(config, *, options=None, timeout=60, binary=None):
    """Mounts CONFIG on a fresh temporary directory and yields its path (a str); on leaving
    the block, also through an exception, unmounts, waits for roifs to exit and removes the
    directory. A failed mount raises MountError with roifs's message.

    options: FUSE mount options (-o), e.g. "allow_other". binary: the roifs program (default
    roifs_binary())."""
    binary = binary or roifs_binary()
    mnt = tempfile.mkdtemp(prefix="roifs-")
    pid, is_mounted = None, False
    try:
        cmd = [binary, "mount"] + (["-o", options] if options else []) + \
            [os.fspath(config), mnt]
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise MountError(f"roifs: mount of {config} did not finish in {timeout} s") from None
        if r.returncode != 0:
            msg = r.stderr.decode(errors="replace").strip() or \
                f"roifs mount failed with exit status {r.returncode}"
            raise MountError(msg, r.returncode)
        is_mounted = True
        pid = _daemon_pid(mnt)
        yield mnt
    finally:
        if is_mounted:
            _unmount(binary, mnt, pid, timeout)
        with contextlib.suppress(OSError):
            os.rmdir(mnt)


def __getattr__(name):
    # `import roifs` then `roifs.worker.run(f)`: the submodule loads on first use (it
    # imports numpy, which the fork server must not load before limiting its threads).
    if name == "worker":
        import importlib
        return importlib.import_module("roifs.worker")
    raise AttributeError(f"module 'roifs' has no attribute {name!r}")
