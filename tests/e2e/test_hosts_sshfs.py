"""Several hosts, one cache, over sshfs (issue 35; docs/operations.md, "Several hosts, one
cache"): the realistic case of tests/e2e/test_hosts.py. Two network namespaces joined by a veth
pair on test addresses (10.231.N.1 and .2, inside the namespaces only):
- host A (namespace A) keeps the cache directory on its own file system and runs sshd there
  (a host key and a user key made by the test in its tmp dir, key authentication only, sshd
  started with -f on the test's own configuration, listening on A's veth address only);
- host B (namespace B, and its own mount, pid, UTS and IPC namespaces as hosts.py makes them)
  sees the cache at the same path through an sshfs mount of A's directory, whose byte-range
  locks stay on B as they do on any sshfs client.
One `roifs warm` per host over one ROI grid, A's started once B's first ROI runs (for 2.4
leases, its claim renewed through sshfs): every ROI is computed once in all (the
processor's call log, both hosts together), both hosts take part, every warm exits 0, nothing
is found damaged, `roifs check` on A counts every ROI result, and a mount on A afterwards
reads the whole array exact with no call at all.

Everything is torn down in finalizers, even on failure: the hosts (their pid namespaces, sshfs
and its mount with them), sshd and its sessions (every process left in the two namespaces),
the veth pair and the namespaces."""
import contextlib
import os
import re
import shutil
import subprocess
import time
from collections import Counter

import numpy as np
import pytest
import zarr

from conftest import mounted, run_roifs
from hosts import CTO, PY, Host
from test_hosts import DAMAGE, LEASE, NROIS, calls, hosts_task, reference

TOOLS = ("ip", "unshare", "/usr/sbin/sshd", "ssh", "ssh-keygen", "sshfs", "fusermount3")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in TOOLS),
    reason="hosts in network namespaces need root, iproute2, openssh-server and sshfs")

DEFECTS = re.compile(r"taken over while held|cannot renew it|its holder is gone|"
                     r"has no record of what it was made from")
RENEWAL = re.compile(r"taken over while held|cannot renew it|its holder is gone")

# Waits for the file argv[1] (at most 30 s), then runs argv[2:]: both hosts start at once.
GATE = r"""
import os, sys, time
t = time.monotonic() + 30
while not os.path.exists(sys.argv[1]) and time.monotonic() < t:
    time.sleep(0.01)
os.execv(sys.argv[2], sys.argv[2:])
"""


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if check and r.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def kill_all_in(netns):
    """SIGKILLs every process in netns (ours: sshd, its sessions, a host left running)."""
    for _ in range(50):
        pids = ip("netns", "pids", netns, check=False).stdout.split()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 9)
        time.sleep(0.1)


@contextlib.contextmanager
def two_netns():
    """Namespaces A and B joined by a veth pair: yields (A, B, A's address, B's address)."""
    tag = os.getpid() % 100000
    a, b, va, vb = f"roifs-a{tag}", f"roifs-b{tag}", f"rfa{tag}", f"rfb{tag}"
    net = f"10.231.{tag % 250 + 1}"
    made = []
    try:
        r = ip("netns", "add", a, check=False)
        if r.returncode:
            pytest.skip(f"cannot make a network namespace here: ip netns add: {r.stderr.strip()}")
        made.append(a)
        ip("netns", "add", b)
        made.append(b)
        ip("link", "add", va, "type", "veth", "peer", "name", vb)
        made.append(va)
        for ns, dev, addr in ((a, va, f"{net}.1/30"), (b, vb, f"{net}.2/30")):
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "addr", "add", addr, "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield a, b, f"{net}.1", f"{net}.2"
    finally:
        for ns in reversed([n for n in made if n in (a, b)]):
            kill_all_in(ns)
        if va in made:  # one end gone takes the other with it, wherever it is
            ip("-n", a, "link", "del", va, check=False)
            ip("link", "del", va, check=False)
        for ns in reversed([n for n in made if n in (a, b)]):
            ip("netns", "del", ns, check=False)


@contextlib.contextmanager
def sshd(d, netns, addr):
    """sshd in netns listening on addr:22, key authentication only, with keys made in d:
    yields the sshfs options that reach it (its host key known, the user key, nothing else)."""
    d.mkdir(mode=0o700)
    for key in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"roifs-{key}",
                        "-f", str(d / key)], check=True, timeout=20)
    (d / "authorized_keys").write_text((d / "user.pub").read_text())
    (d / "known_hosts").write_text(f"{addr} {(d / 'host.pub').read_text()}")
    config = d / "sshd_config"
    config.write_text(f"""ListenAddress {addr}:22
HostKey {d / 'host'}
AuthorizedKeysFile {d / 'authorized_keys'}
PidFile {d / 'sshd.pid'}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
X11Forwarding no
AllowTcpForwarding no
Subsystem sftp internal-sftp
""")
    # sshd's privilege separation directory (made by Debian's ssh service when it runs)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    log = d / "sshd.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(["ip", "netns", "exec", netns, "/usr/sbin/sshd", "-D", "-e",
                                 "-f", str(config)], stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        t = time.monotonic() + 10
        while "Server listening on" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < t, \
                f"sshd not listening: {log.read_text(errors='replace')}"
            time.sleep(0.05)
        yield ["-F", "/dev/null", "-o",
               f"IdentityFile={d / 'user'},IdentitiesOnly=yes,UserKnownHostsFile={d / 'known_hosts'},"
               "StrictHostKeyChecking=yes,BatchMode=yes,PasswordAuthentication=no,"
               "ConnectTimeout=10,ServerAliveInterval=5,ServerAliveCountMax=3"], log
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.mark.timeout(90)
def test_warm_on_the_sshd_host_and_an_sshfs_host_computes_every_roi_once(tmp_path, roifs_bin):
    t0 = time.monotonic()
    real = tmp_path / "cache"
    # the cache is at one path on both hosts: A's own directory, B's sshfs mount over it
    # B's first ROI runs 2.4 leases, which B must renew all along through sshfs (else A
    # takes it over and computes it again); A starts once it runs (A, local, is so much quicker
    # at taking work that B, started at the same time, may get none)
    flag = tmp_path / "long.flag"
    task, rois, inp, real = hosts_task(tmp_path, 1, 0.05, view=real, long_host="b",
                                       long_s=LEASE * 2.4, long_flag=flag)
    log, go, out = tmp_path / "calls.log", tmp_path / "go", tmp_path / "out"
    warm = [PY, "-c", GATE, str(go), roifs_bin, "warm", "-j", "2", str(task.config)]
    warm_a = [PY, "-c", GATE, str(flag), roifs_bin, "warm", "-j", "2", str(task.config)]
    with two_netns() as (ns_a, ns_b, addr_a, _), sshd(tmp_path / "ssh", ns_a, addr_a) as (
            ssh_opts, sshd_log):
        sshfs = ["sshfs", *ssh_opts, "-o", f"dir_cache=no,{CTO}", f"root@{addr_a}:{real}", real]
        a = Host("a", real, real, out, [warm_a], mount=[], netns=ns_a)
        b = Host("b", real, real, out, [warm], mount=sshfs, netns=ns_b)
        try:
            a.start()
            b.start()
            t = time.monotonic() + 20
            while not (a.ready() is not None and b.ready() is not None):
                assert time.monotonic() < t and b.proc.poll() is None, \
                    f"host b's sshfs mount not made; sshd:\n{sshd_log.read_text()}"
                time.sleep(0.05)
            # B sees the cache through sshfs, A through nothing but its own file system
            assert " - fuse.sshfs " in b.ready(), b.ready()
            assert a.ready() == "", a.ready()
            go.touch()
            rcs = {"a": a.wait(60), "b": b.wait(60)}
        finally:
            a.kill()
            b.kill()
    logs = f"--- a:\n{a.log(0)}\n--- b:\n{b.log(0)}"
    assert rcs == {"a": [0], "b": [0]}, logs
    assert not DAMAGE.search(logs), logs
    n = Counter(int(c[1]) for c in calls(log))
    by_host = Counter(c[2] for c in calls(log))
    assert sorted(n) == list(range(NROIS)), (sorted(n), logs)
    twice = {r: k for r, k in n.items() if k > 1}
    assert not twice, f"{sum(n.values())} calls for {NROIS} ROIs: {twice}\n{logs}"
    print(f"calls by host: {dict(by_host)}")
    # B's long ROI ran, renewed through sshfs, and was never computed again (above)
    assert re.search(r"^long \d+ b$", log.read_text(), re.M), log.read_text()

    # A afterwards: every ROI result counted, the whole array read exact, no call made
    r = run_roifs(roifs_bin, "check", task.config)
    assert r.returncode == 0, r.stderr
    cached = re.search(rf"cached: (\d+) of (\d+) chunks, {NROIS} of {NROIS} ROI results", r.stdout)
    assert cached, r.stdout
    with mounted(roifs_bin, task.config) as m:
        got = zarr.open(str(m.path), mode="r")[...]
        mlog = m.log_text()
    assert not DAMAGE.search(mlog), mlog
    assert np.array_equal(got, reference(inp, rois, 1))
    assert len(calls(log)) == NROIS, "the mount on A computed again"
    print(f"took {time.monotonic() - t0:.1f} s")

    # what roifs over sshfs once got wrong (docs/operations.md, "Several hosts, one cache"): a
    # claim made by hard-linking a spare is another inode number through sshfs, and B did not
    # recognise its own claims (never renewed, never removed, A waiting a lease for each); B
    # kept chunk records in sidecar files that A, with xattrs, did not read, nor B A's
    # (a chunk that A made before B first opened the cache has its record in an xattr, which B
    # cannot read through sshfs: B makes it again once, from the stored results, and says so)
    misjudged = DEFECTS.findall(a.log(0) + mlog) + RENEWAL.findall(b.log(0))
    assert not misjudged, (Counter(misjudged), logs + mlog)
    assert cached[1] == cached[2], (r.stdout, logs)
    assert by_host["a"] and by_host["b"], (by_host, logs)  # both hosts took part
