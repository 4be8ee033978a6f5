"""Simulated hosts sharing one cache directory (issue 35; docs/operations.md, "Several hosts,
one cache"): each host is a process tree in its own mount, pid, UTS (host name) and IPC
namespaces (unshare), which sees the cache through its own bindfs mirror mounted at one path
(VIEW) inside its mount namespace (or through another mount command, such as sshfs from a host
in another network namespace: tests/e2e/test_hosts_sshfs.py). Byte-range locks taken through one FUSE mirror stay in
that mirror, exactly as node-local locks (Lustre localflock, BeeGFS, NFS local_lock, sshfs)
stay on their node; exclusive create, rename and link reach the directory itself.

A host runs a list of commands at once and records each one's exit status and output; when
the host ends (its pid namespace's first process exits), everything in it ends with it,
bindfs included, so nothing is left behind."""
import json
import os
import subprocess
import sys
from pathlib import Path

PY = "/usr/bin/python3"

# FUSE's caches of attributes and names off: the kernel asks bindfs, which asks the directory,
# at each open and stat, as an NFS client does at each open (close-to-open consistency, which
# docs/operations.md asks of a shared file system); a mirror with FUSE's default one-second
# caches shows another host's appends and new files up to a second late even to a new open.
CTO = "attr_timeout=0,entry_timeout=0,negative_timeout=0"

# Runs inside the namespaces: python3 -c HOST_MAIN SPEC.json
HOST_MAIN = r"""
import json, os, signal, socket, subprocess, sys, time
spec = json.load(open(sys.argv[1]))
socket.sethostname(spec["name"])
if spec["mount"]:
    os.makedirs(spec["view"], exist_ok=True)
    subprocess.run(spec["mount"], check=True, timeout=30)
# NAME.ready: the mount table line of the view as this host sees it (the test checks the kind)
ready = os.path.join(spec["out"], spec["name"] + ".ready")
with open(ready + ".tmp", "w") as f:
    f.write("".join(l for l in open("/proc/self/mountinfo")
                    if l.split()[4] == os.path.realpath(spec["view"])))
os.rename(ready + ".tmp", ready)
procs = []
for i, argv in enumerate(spec["commands"]):
    out = open(os.path.join(spec["out"], f"{spec['name']}-{i}.log"), "wb")
    env = dict(os.environ, HOST_NAME=spec["name"], HOST_CMD=str(i))
    procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env))
    with open(os.path.join(spec["out"], f"{spec['name']}-{i}.pid"), "w") as f:
        f.write(str(procs[-1].pid))
rcs = [p.wait() for p in procs]
with open(os.path.join(spec["out"], f"{spec['name']}.rc"), "w") as f:
    json.dump(rcs, f)
if spec["mount"]:
    subprocess.run(["fusermount3", "-u", "-z", spec["view"]], timeout=30)
"""


def bindfs(real, view):
    """The command mounting a bindfs mirror of real at view, FUSE's caches off."""
    return ["bindfs", "--no-allow-other", "-o", CTO, str(real), str(view)]


class Host:
    """A simulated host running commands (lists of arguments) at once; start() then wait().
    mount: the command mounting the cache at view in the host's mount namespace (default a
    bindfs mirror of real; [] for none: the host sees the directory itself). netns: the
    network namespace (ip netns) the host runs in, default the machine's."""

    def __init__(self, name, real, view, out, commands, mount=None, netns=None):
        self.name, self.out, self.netns = name, Path(out), netns
        self.out.mkdir(parents=True, exist_ok=True)
        self.spec = self.out / f"{name}.json"
        mount = bindfs(real, view) if mount is None else [str(a) for a in mount]
        self.spec.write_text(json.dumps({"name": name, "view": str(view), "out": str(out),
                                         "commands": commands, "mount": mount}))
        self.proc = None

    def ready(self):
        """The mount table line of the view in the host once its mount is made, else None."""
        p = self.out / f"{self.name}.ready"
        return p.read_text() if p.exists() else None

    def start(self):
        netns = ["ip", "netns", "exec", self.netns] if self.netns else []
        self.proc = subprocess.Popen(
            [*netns, "unshare", "--mount", "--pid", "--uts", "--ipc", "--fork", "--mount-proc",
             "--propagation", "private", PY, "-c", HOST_MAIN, str(self.spec)],
            stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait(self, timeout):
        """The commands' exit statuses; kills the host when it is not done within timeout."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        rc = self.out / f"{self.name}.rc"
        return json.loads(rc.read_text()) if rc.exists() else None

    def log(self, i):
        p = self.out / f"{self.name}-{i}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def kill(self):
        """Kills the host: its namespace's first process, and so every process in it."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)


def run_hosts(hosts, timeout):
    """Starts the hosts at once and waits for all: {name: exit statuses}."""
    for h in hosts:
        h.start()
    try:
        return {h.name: h.wait(timeout) for h in hosts}
    finally:
        for h in hosts:
            h.kill()
