"""roifs.worker: run a Python function as a roifs `worker` processor (roifs SPEC §8.2).

In your script:

    import numpy as np
    from roifs.worker import run          # or, as before: from roifs_worker import run

    def process(block, roi):
        # block: the ROI's read region (the ROI grown by the halo, clipped to the array),
        # a numpy array of roi.dtype; return an array of the same shape (roi.out_dtype).
        return block + int(roi.params.get("value", "1"))

    if __name__ == "__main__":
        run(process)

and in the task file:

    [process]
    worker = /usr/bin/python3 my_worker.py

or, without the last two lines in the script, `worker = /usr/bin/python3 -m roifs.worker
my_worker:process` (a module name found from the configuration file's directory, or a path
to a .py file). roifs puts this package's directory first in PYTHONPATH for its workers.
The same script also serves as `[process] python = my_worker.py:process` (a fork server
imports it once; run() then does nothing).

The loop reads one request at a time from standard input, calls process() and writes the
reply to standard output. Standard output is reserved for the protocol: from the import of
this module on (in a process roifs started), print() and anything else written to it goes to
standard error, which roifs logs. An exception fails that ROI only
(its type, message and line show in the status file); the worker keeps running.

`python3 -m roifs.worker --python FILE.py:FUNCTION` serves a `python =` function over this
protocol instead (what roifs runs for `python =` with `executor = slurm`): a read-only block,
roi.label, and the result cast as roifs's builtins cast it.
"""

import importlib
import importlib.util
import json
import os
import sys

import numpy as np

import roifs
from roifs import _array
from roifs._array import describe as _describe
from roifs._array import store as _store
from roifs._traceback import format_user_exception

__all__ = ["Roi", "run", "main"]


class Roi(_array.Roi):
    """What a request says about the ROI being computed: the attributes of a `python =`
    function's roi (index, start, stop, in_start, in_shape, params, dtype, out_dtype, label),
    with out None (a worker writes its result to standard output)."""

    __slots__ = ()

    def __init__(self, request):
        super().__init__(request["roi"], tuple(request["start"]), tuple(request["stop"]),
                         tuple(request["in_start"]), tuple(request["in_shape"]),
                         _dtype(request["dtype"]), _dtype(request["out_dtype"]),
                         request.get("params") or {}, request.get("label"))


_dtypes = {}


def _dtype(typestr):
    dt = _dtypes.get(typestr)
    if dt is None:
        dt = _dtypes[typestr] = np.dtype(typestr)
    return dt


class ProtocolError(Exception):
    pass


def _read_exactly(stream, view):
    got = 0
    while got < len(view):
        n = stream.readinto(view[got:])
        if not n:
            raise ProtocolError(f"input ended after {got} of {len(view)} bytes")
        got += n


def _write_all(fd, parts):
    """Writes the byte-like parts (C-contiguous) with as few system calls as possible."""
    n = os.writev(fd, parts)
    if n == sum(memoryview(p).nbytes for p in parts):
        return
    rest = b"".join(memoryview(p).cast("B") for p in parts)[n:]
    while rest:
        rest = rest[os.write(fd, rest):]


def _as_output(result, roi):
    """result as a C-contiguous array of roi.out_dtype and shape roi.in_shape."""
    result = np.asarray(result)
    if result.shape != roi.in_shape:
        raise ValueError(f"process() returned shape {result.shape}, expected {roi.in_shape} "
                         f"(the read region)")
    if result.dtype != roi.out_dtype:
        if not np.can_cast(result.dtype, roi.out_dtype, "same_kind"):
            raise TypeError(f"process() returned {result.dtype}, which does not cast to "
                            f"{roi.out_dtype} (same_kind); convert it with .astype()")
        result = result.astype(roi.out_dtype)
    return np.ascontiguousarray(result)


def _as_python_output(result, roi):
    """The cast of `python =` functions (roifs._array.store), into a fresh array."""
    out = np.empty(roi.in_shape, roi.out_dtype)
    _store(result, out)
    return out


def _serve(process, inp, out_fd, as_output=_as_output, read_only=False):
    decode = json.JSONDecoder().decode
    while True:
        line = inp.readline()
        if not line:
            return
        try:
            request = decode(line.decode("utf-8"))
            roi = Roi(request)
            block = np.empty(roi.in_shape, roi.dtype)
            nbytes = int(request["nbytes"])
        except (ValueError, KeyError, TypeError) as e:
            raise ProtocolError(f"bad request line {line[:80]!r}: {e}") from None
        if block.nbytes != nbytes:
            raise ProtocolError(f"request says {nbytes} bytes for {roi.in_shape} {roi.dtype}")
        _read_exactly(inp, memoryview(block).cast("B"))
        block.flags.writeable = not read_only
        try:
            result = as_output(process(block, roi), roi)
        except Exception as e:
            sys.stderr.write(f"roi {roi.index}: " + format_user_exception(e))
            sys.stderr.flush()
            reply = json.dumps({"ok": False, "error": _describe(e)}) + "\n"
            _write_all(out_fd, [reply.encode()])
            continue
        header = b'{"ok": true, "nbytes": %d}\n' % result.nbytes
        _write_all(out_fd, [header, result])


_protocol_fd = None


def _reserve_stdout():
    """Keeps the real standard output for replies; fd 1 becomes a copy of standard error, so
    that print() and C code writing to fd 1 cannot corrupt the protocol."""
    global _protocol_fd
    if _protocol_fd is None:
        _protocol_fd = os.dup(1)
        os.set_inheritable(_protocol_fd, False)
        os.dup2(2, 1)
        sys.stdout.flush()  # what earlier print()s left in the buffer now goes to stderr
        sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
    return _protocol_fd


if os.environ.get("ROIFS_WORKER") == "1":
    # Started by roifs as a worker: protect the protocol from print()s at import time too.
    _reserve_stdout()


def run(process, _python=False):
    """Serves roifs requests with process(block, roi) until roifs closes standard input.
    Does nothing while roifs's fork server imports the script for `python =`."""
    if roifs._in_fork_server:
        return
    out_fd = _reserve_stdout()
    try:
        if _python:
            _serve(process, sys.stdin.buffer, out_fd, _as_python_output, True)
        else:
            _serve(process, sys.stdin.buffer, out_fd)
    except BrokenPipeError:
        pass  # roifs went away
    except ProtocolError as e:
        sys.stderr.write(f"roifs.worker: {e}\n")
        sys.exit(2)


def _load(spec):
    """'module:function' or 'path/to/file.py:function'."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise SystemExit(f"roifs.worker: expected MODULE:FUNCTION or FILE.py:FUNCTION, "
                         f"got {spec!r}")
    if target.endswith(".py"):
        mod_spec = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(target))[0], target)
        if mod_spec is None:
            raise SystemExit(f"roifs.worker: cannot load {target}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(target)
    try:
        return getattr(module, name)
    except AttributeError:
        raise SystemExit(f"roifs.worker: {target} has no function {name!r}") from None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    python = bool(argv) and argv[0] == "--python"
    if python:
        argv = argv[1:]
    if len(argv) != 1:
        raise SystemExit("usage: python3 -m roifs.worker [--python] MODULE:FUNCTION | "
                         "FILE.py:FUNCTION")
    _reserve_stdout()  # before the user's module runs
    run(_load(argv[0]), _python=python)


if __name__ == "__main__":
    # The user's `import roifs.worker` must get this copy, whose state (the protocol's fd)
    # is set up, not a second one.
    sys.modules.setdefault("roifs.worker", sys.modules["__main__"])
    roifs.worker = sys.modules["roifs.worker"]
    main()
