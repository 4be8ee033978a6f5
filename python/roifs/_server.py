"""roifs._server: the fork server behind `[process] python = FILE.py:FUNCTION` (roifs
docs/processors.md, Python functions), started by roifs as
`INTERPRETER -c "...; roifs._server.main()" FILE.py:FUNCTION` (src/proc/pyserver.c).

It limits the BLAS/OpenMP thread pools, imports numpy and the user's file once, checks the
function, and then forks one worker per request of roifs, so that every worker starts with
the imports done (memory shared copy-on-write). It forks only while it is single-threaded.

Channels (all set up by roifs, see src/proc/pyserver.h for the byte layouts):
- fd 0, the control socket (SOCK_SEQPACKET): a JSON hello (params), then requests "fork"
  (with a worker socket, a stderr pipe and a memfd passed by SCM_RIGHTS), "kill" and "quit";
  one JSON reply each. End of file (roifs died) ends the server and its workers.
- per worker, a SOCK_SEQPACKET socket: a ROI request header, or a batch of them (small ROIs:
  one round trip for up to 32); the blocks lie in the memfd, mapped by both sides, and the
  results are written there. The server keeps a copy of each
  worker's socket to report the worker's death (its wait status) to roifs.
"""

import os
import sys

# Before numpy is imported, by this module or by the user's: one thread per BLAS/OpenMP
# pool. roifs runs `threads` workers side by side, and a process forks safely only while it
# has no other threads (a pool started at import would be one).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import ctypes  # noqa: E402
import importlib  # noqa: E402
import io  # noqa: E402
import importlib.util  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import mmap  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import roifs  # noqa: E402
from roifs._traceback import format_user_exception  # noqa: E402

# ROI request: kind, ndim, roi, label (0: none), map_size, in_off, in_nbytes, out_off,
# out_nbytes, in and out typestrs; then start, stop, in_start, in_shape (ndim u64 each).
REQ = struct.Struct("<IIQQQQQQQ8s8s")
# Reply: kind, 0, value; an error's message follows (UTF-8).
REP = struct.Struct("<IIq")
REQ_ROI, REQ_BATCH = 1, 2
# [measure] python (roifs docs/measurements.md): one object, the ROI header's layout read as
# kind 3, ndim, channels, label, map_size, labels crop offset, its bytes with the intensities',
# JSON result offset, its capacity, labels and intensity typestrs; dims: the crop's start and
# stop, the object's bbox start and stop. The intensities follow the labels at MEASURE_ALIGN.
REQ_MEASURE = 3
MEASURE_ALIGN = 64
REP_OK, REP_ERROR, REP_DIED, REP_BATCH = 1, 2, 3, 4
# A batch: kind, count, then `count` ROI requests as above. Its reply: REP_BATCH (value 1 when
# the worker wrote to stdout or stderr), then `count` items (kind, length of its message),
# then the error messages one after the other.
BATCH = struct.Struct("<II")
ITEM = struct.Struct("<II")
MSG_MAX = 4000
BATCH_MSG_MAX = 1000
EXIT_GRACE = 2.0
PR_SET_PDEATHSIG = 1


class StartError(Exception):
    pass


def _last_line(exc):
    """'SyntaxError: invalid syntax (seg.py, line 3)': type and message on one line."""
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _load(spec, nargs=2):
    """The function named by 'FILE.py:FUNCTION' (relative to the current directory, the
    configuration's) or 'MODULE:FUNCTION'."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise StartError(f"expected FILE.py:FUNCTION or MODULE:FUNCTION, got {spec!r}")
    try:
        if target.endswith(".py") or os.sep in target:
            path = os.path.abspath(target)
            if not os.path.isfile(path):
                raise StartError(f"{target}: no such file")
            modname = os.path.splitext(os.path.basename(path))[0]
            # As for `python3 FILE.py`: its directory comes first, for its own imports.
            sys.path.insert(0, os.path.dirname(path))
            mspec = importlib.util.spec_from_file_location(modname, path)
            module = importlib.util.module_from_spec(mspec)
            sys.modules.setdefault(modname, module)
            mspec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except StartError:
        raise
    except BaseException as e:  # SystemExit and KeyboardInterrupt at import too
        sys.stderr.write(format_user_exception(e))
        raise StartError(f"{target}: {_last_line(e)}") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise StartError(f"{target} has no function {name!r}")
    if not callable(fn):
        raise StartError(f"{target}: {name} is a {type(fn).__name__}, not a function")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some C functions have none: let the call tell
        return fn
    call, words = ("(labels, intensity, obj)", "three") if nargs == 3 else ("(block, roi)", "two")
    try:
        sig.bind(*([None] * nargs))
    except TypeError:
        raise StartError(f"{name}{sig} cannot be called as {name}{call} "
                         f"(it must take {words} arguments)") from None
    return fn


def _check_single_threaded(target):
    tasks = len(os.listdir("/proc/self/task"))
    if threading.active_count() == 1 and tasks == 1:
        return
    names = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    raise StartError(
        f"the interpreter runs {tasks} threads after importing {target}"
        f"{' (' + ', '.join(names) + ')' if names else ''}; roifs forks its workers from it, "
        f"which is safe only without threads: start threads in the function (at its first "
        f"call), not at import")


def _send_json(sock, obj):
    sock.send(json.dumps(obj).encode())


# ---------------------------------------------------------------- a worker


def _views(mm, dims, nd, in_off, out_off, idt, odt, dtypes):
    shape = dims[3 * nd:]
    di = dtypes.get(idt)
    if di is None:
        di = dtypes[idt] = np.dtype(idt.rstrip(b"\0").decode())
    do = dtypes.get(odt)
    if do is None:
        do = dtypes[odt] = np.dtype(odt.rstrip(b"\0").decode())
    n = 1
    for s in shape:
        n *= s
    block = np.frombuffer(mm, di, n, in_off).reshape(shape)
    block.flags.writeable = False
    out = np.frombuffer(mm, do, n, out_off).reshape(shape)
    return block, out


def _serve_rois(sock, mem_fd, fn, params):
    """One request at a time until roifs closes the socket: a ROI, or a batch of small ROIs
    (one round trip for all)."""
    buf = bytearray(1 << 20)
    unpack = REQ.unpack_from
    dims_of = {}
    dtypes = {}
    state = {"mm": None, "size": 0, "views": {}}
    Roi, store, describe = _array.Roi, _array.store, _array.describe
    ok, ok_wrote = REP.pack(REP_OK, 0, 0), REP.pack(REP_OK, 0, 1)
    item_ok = ITEM.pack(REP_OK, 0)

    def roi_at(off):
        """Runs the ROI whose request is at buf[off:]: (next offset, None or the error)."""
        kind, nd, index, label, map_size, in_off, _, out_off, _, idt, odt = unpack(buf, off)
        st = dims_of.get(nd)
        if st is None:
            st = dims_of[nd] = struct.Struct(f"<{4 * nd}Q")
        dims = st.unpack_from(buf, off + REQ.size)
        if map_size != state["size"]:  # roifs grew the memfd: map it anew (old views keep theirs)
            state["mm"], state["size"] = mmap.mmap(mem_fd, map_size), map_size
            state["views"] = {}
        views = state["views"]
        # The same shape, place and dtypes as an earlier ROI (a grid): the same views
        k = (dims[3 * nd:], in_off, out_off, idt, odt)
        v = views.get(k)
        if v is None:
            if len(views) > 256:
                views.clear()
            v = views[k] = _views(state["mm"], dims, nd, in_off, out_off, idt, odt, dtypes)
        block, out = v
        roi = Roi(index, dims[:nd], dims[nd:2 * nd], dims[2 * nd:3 * nd], k[0], block.dtype,
                  out.dtype, dict(params), label or None, out)
        nxt = off + REQ.size + st.size
        try:
            store(fn(block, roi), out)
        except Exception as e:
            sys.stderr.write(f"roi {index}: " + format_user_exception(e))
            sys.stderr.flush()
            return nxt, describe(e).encode("utf-8", "replace")
        return nxt, None

    def measure_at():
        """Calls fn for the object whose request is in buf: None or the error."""
        _, nd, nch, label, map_size, in_off, _, out_off, out_cap, ldt, idt = unpack(buf, 0)
        dims = struct.unpack_from(f"<{4 * nd}Q", buf, REQ.size)
        if map_size != state["size"]:
            state["mm"], state["size"] = mmap.mmap(mem_fd, map_size), map_size
            state["views"] = {}
        mm = state["mm"]
        start, stop = dims[:nd], dims[nd:2 * nd]
        shape = tuple(b - a for a, b in zip(start, stop))
        n = 1
        for s in shape:
            n *= s
        ld = np.dtype(ldt.rstrip(b"\0").decode())
        idt_ = np.dtype(idt.rstrip(b"\0").decode())
        labels = np.frombuffer(mm, ld, n, in_off).reshape(shape)
        labels.flags.writeable = False
        i_off = in_off + (n * ld.itemsize + MEASURE_ALIGN - 1) // MEASURE_ALIGN * MEASURE_ALIGN
        inten = np.frombuffer(mm, idt_, n * nch, i_off).reshape((nch,) + shape)
        inten.flags.writeable = False
        obj = {"label": label, "start": start, "stop": stop, "bbox_start": dims[2 * nd:3 * nd],
               "bbox_stop": dims[3 * nd:], "params": dict(params)}
        try:
            res = fn(labels, inten, obj)
            if not isinstance(res, dict):
                raise TypeError(f"the function returned {type(res).__name__}, not a dict")
            out = {}
            for k, v in res.items():
                if not isinstance(k, str):
                    raise TypeError(f"feature name {k!r} is not a string")
                if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
                    raise TypeError(f"feature {k!r}: {type(v).__name__} is not a number")
                out[k] = float(v)
            data = json.dumps(out, allow_nan=True).encode() + b"\0"
            if len(data) > out_cap:
                raise ValueError(f"{len(out)} features: more than roifs takes ({out_cap} bytes)")
        except Exception as e:
            sys.stderr.write(f"object {label}: " + format_user_exception(e))
            sys.stderr.flush()
            return f"object {label}: {describe(e)}".encode("utf-8", "replace")
        mm[out_off:out_off + len(data)] = data
        return None

    while True:
        n = sock.recv_into(buf)
        if n == 0:
            return
        kind, count = BATCH.unpack_from(buf)
        if kind == REQ_MEASURE:
            msg = measure_at()
            if msg is not None:
                sock.send(REP.pack(REP_ERROR, 0, 0) + msg[:MSG_MAX])
            else:
                sock.send(ok_wrote if _wrote[0] else ok)
            _wrote[0] = False
            continue
        if kind == REQ_BATCH:
            off, items, msgs = BATCH.size, [], []
            for _ in range(count):
                off, msg = roi_at(off)
                if msg is None:
                    items.append(item_ok)
                else:
                    msg = msg[:BATCH_MSG_MAX]
                    items.append(ITEM.pack(REP_ERROR, len(msg)))
                    msgs.append(msg)
            wrote = _wrote[0]
            _wrote[0] = False
            sock.send(b"".join([REP.pack(REP_BATCH, 0, int(wrote))] + items + msgs))
            continue
        _, msg = roi_at(0)
        if msg is not None:
            sock.send(REP.pack(REP_ERROR, 0, 0) + msg[:MSG_MAX])
            _wrote[0] = False
        elif _wrote[0]:  # roifs reads the worker's stderr pipe then
            _wrote[0] = False
            sock.send(ok_wrote)
        else:
            sock.send(ok)


_wrote = [False]  # the worker wrote to sys.stdout or sys.stderr since its last reply


class _NotingWriter(io.TextIOWrapper):
    def write(self, s):
        _wrote[0] = True
        return super().write(s)


def _noting(fd):
    return _NotingWriter(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)),
                         line_buffering=True, errors="backslashreplace")


def _worker(fds, fn, params, server_pid):
    """The child after fork: never returns."""
    code = 0
    try:
        sock_fd, err_fd, mem_fd = fds
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(err_fd, 1)
        os.dup2(err_fd, 2)
        os.close(err_fd)
        sys.stdout, sys.stderr = _noting(1), _noting(2)
        # Dies with the server; the server dies with roifs (end of file on its control).
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server_pid:
            os._exit(1)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _serve_rois(socket.socket(fileno=sock_fd), mem_fd, fn, params)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# ---------------------------------------------------------------- the server


class Server:
    def __init__(self, ctl, fn, params, target):
        self.ctl, self.fn, self.params, self.target = ctl, fn, params, target
        self.poller = select.poll()
        self.poller.register(ctl, select.POLLIN)
        # pidfd -> (pid, the server's copy of the worker's socket, its shared first page)
        self.children = {}

    def fork(self, fds):
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            return {"ok": False, "error": f"fork request with {len(fds)} descriptors, not 3"}
        try:
            _check_single_threaded(self.target)
        except StartError as e:
            return {"ok": False, "error": str(e)}
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            self.ctl.close()
            for pidfd, (_, sock, shared) in self.children.items():
                os.close(pidfd)
                sock.close()
                shared.close()
            _worker(fds, self.fn, self.params, me)
        os.close(fds[1])
        shared = mmap.mmap(fds[2], mmap.PAGESIZE)
        os.close(fds[2])
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = (pid, socket.socket(fileno=fds[0]), shared)
        self.poller.register(pidfd, select.POLLIN)
        return {"ok": True, "pid": pid}

    def reap(self, pidfd, block=True):
        pid, sock, shared = self.children.pop(pidfd)
        self.poller.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        struct.pack_into("<I", shared, 0, 1)  # struct py_shared: dead, before the notice
        shared.close()
        try:
            sock.send(REP.pack(REP_DIED, 0, status))
        except OSError:
            pass  # roifs closed its end: it no longer waits for this worker
        sock.close()

    def kill(self, pid):
        if any(p == pid for p, _, _ in self.children.values()):
            os.kill(pid, signal.SIGKILL)
            return {"ok": True}
        return {"ok": False, "error": f"no worker {pid}"}

    def request(self):
        """One control request; False once the server should end."""
        data, fds, _, _ = socket.recv_fds(self.ctl, 65536, 8)
        if not data:
            return False
        msg = json.loads(data)
        op = msg.get("op")
        if op == "fork":
            _send_json(self.ctl, self.fork(fds))
        elif op == "kill":
            _send_json(self.ctl, self.kill(msg.get("pid")))
        elif op == "quit":
            return False
        else:
            _send_json(self.ctl, {"ok": False, "error": f"unknown request {op!r}"})
        return True

    def run(self):
        ctl_fd = self.ctl.fileno()
        while True:
            for fd, _ in self.poller.poll():
                if fd == ctl_fd:
                    try:
                        go_on = self.request()
                    except (OSError, ValueError):
                        go_on = False
                    if not go_on:
                        return
                elif fd in self.children:
                    self.reap(fd)

    def stop(self):
        """Workers have end of file on their sockets (roifs closed them, or died): they get
        EXIT_GRACE to exit, then are killed, with anything else left in the process group."""
        self.poller.unregister(self.ctl)
        deadline = time.monotonic() + EXIT_GRACE
        while self.children and time.monotonic() < deadline:
            for fd, _ in self.poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                if fd in self.children:
                    self.reap(fd)
        for pidfd, (pid, _, _) in list(self.children.items()):
            os.kill(pid, signal.SIGKILL)
            self.reap(pidfd)
        _kill_group_but_me()


def _kill_group_but_me():
    """What the workers started and left behind (they shared the server's process group)."""
    me, group = os.getpid(), os.getpgrp()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                pgrp = int(f.read().rpartition(")")[2].split()[2])
        except (OSError, ValueError, IndexError):
            continue
        if pgrp == group:
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def main():
    global np, _array
    # fd 0 is the control socket; user code gets /dev/null as its standard input.
    ctl = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    hello = json.loads(ctl.recv(1 << 20) or b"{}")
    spec = sys.argv[1] if len(sys.argv) > 1 else ""
    target = spec.rpartition(":")[0] or spec
    t0 = time.monotonic()
    try:
        try:
            import numpy as np
            from roifs import _array
        except ImportError as e:
            raise StartError(f"{_last_line(e)} (the interpreter {sys.executable} needs numpy)")
        roifs._in_fork_server = True
        try:
            fn = _load(spec, 3 if hello.get("measure") else 2)
        finally:
            roifs._in_fork_server = False
        _check_single_threaded(target)
    except StartError as e:
        _send_json(ctl, {"ok": False, "error": str(e)})
        return
    _send_json(ctl, {"ok": True, "pid": os.getpid(), "import_s": time.monotonic() - t0})
    server = Server(ctl, fn, hello.get("params") or {}, target)
    try:
        server.run()
    finally:
        server.stop()
        # The control socket closes with the process, not before, so that its end of file
        # tells roifs that the server is gone (no finalisation after it).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
