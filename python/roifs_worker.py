"""roifs_worker: run a Python function as a roifs `worker` processor (roifs SPEC §8.2).

In your script:

    import numpy as np
    from roifs_worker import run

    def process(block, roi):
        # block: the ROI's read region (the ROI grown by the halo, clipped to the array),
        # a numpy array of roi.dtype; return an array of the same shape (roi.out_dtype).
        return block + int(roi.params.get("value", "1"))

    if __name__ == "__main__":
        run(process)

and in the task file:

    [process]
    worker = /usr/bin/python3 my_worker.py

or, without the last two lines in the script, `worker = /usr/bin/python3 -m roifs_worker
my_worker:process` (a module name found from the configuration file's directory, or a path
to a .py file). roifs puts this module's directory first in PYTHONPATH for its workers.

The loop reads one request at a time from standard input, calls process() and writes the
reply to standard output. Standard output is reserved for the protocol: from the import of
this module on (in a process roifs started), print() and anything else written to it goes to
standard error, which roifs logs. An exception fails that ROI only
(its type, message and line show in the status file); the worker keeps running.
"""

import importlib
import importlib.util
import json
import os
import sys
import sysconfig
import traceback

import numpy as np

__all__ = ["Roi", "run", "main"]


class Roi:
    """What a request says about the ROI being computed.

    index     ROI index (its 0-based line in the ROI list)
    start     ROI box start, a tuple of ints per dimension
    stop      ROI box stop (exclusive)
    in_start  read region start: the box grown by the halo, clipped to the array
    in_shape  read region shape, which is block.shape
    params    {name: value} of the task's param.* keys, values as strings
    dtype     numpy dtype of block
    out_dtype numpy dtype of the result
    """

    __slots__ = ("index", "start", "stop", "in_start", "in_shape", "params", "dtype",
                 "out_dtype")

    def __init__(self, request):
        self.index = request["roi"]
        self.start = tuple(request["start"])
        self.stop = tuple(request["stop"])
        self.in_start = tuple(request["in_start"])
        self.in_shape = tuple(request["in_shape"])
        self.params = request.get("params") or {}
        self.dtype = _dtype(request["dtype"])
        self.out_dtype = _dtype(request["out_dtype"])

    @property
    def inner(self):
        """Slices selecting the ROI box inside block (they differ with a halo)."""
        return tuple(slice(a - s, b - s) for a, b, s in zip(self.start, self.stop, self.in_start))

    def __repr__(self):
        return (f"Roi(index={self.index}, start={self.start}, stop={self.stop}, "
                f"in_start={self.in_start}, in_shape={self.in_shape})")


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


def _is_library(path, _dirs=[]):
    """True for Python's own modules, installed packages and this module."""
    if not _dirs:
        paths = sysconfig.get_paths()
        _dirs.extend(os.path.realpath(paths[k]) + os.sep
                     for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
        _dirs.append(os.path.dirname(os.path.realpath(__file__)) + os.sep)
    parts = path.split(os.sep)
    return path.startswith(tuple(_dirs)) or "site-packages" in parts or "dist-packages" in parts


def _describe(exc):
    """'ValueError: message (script.py:12)', naming the innermost frame of the traceback in
    the user's code rather than in a library (no frame when roifs_worker itself raised)."""
    msg = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        # "<stdin>", "<string>", but also numpy's "<__array_function__ internals>": skipped
        if not frame.filename.startswith("<") and \
                not _is_library(os.path.realpath(frame.filename)):
            return text + f" ({os.path.basename(frame.filename)}:{frame.lineno})"
    return text


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


def _serve(process, inp, out_fd):
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
        try:
            result = _as_output(process(block, roi), roi)
        except Exception as e:
            sys.stderr.write(f"roi {roi.index}: " + "".join(traceback.format_exception(e)))
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


def run(process):
    """Serves roifs requests with process(block, roi) until roifs closes standard input."""
    out_fd = _reserve_stdout()
    try:
        _serve(process, sys.stdin.buffer, out_fd)
    except BrokenPipeError:
        pass  # roifs went away
    except ProtocolError as e:
        sys.stderr.write(f"roifs_worker: {e}\n")
        sys.exit(2)


def _load(spec):
    """'module:function' or 'path/to/file.py:function'."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise SystemExit(f"roifs_worker: expected MODULE:FUNCTION or FILE.py:FUNCTION, "
                         f"got {spec!r}")
    if target.endswith(".py"):
        mod_spec = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(target))[0], target)
        if mod_spec is None:
            raise SystemExit(f"roifs_worker: cannot load {target}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(target)
    try:
        return getattr(module, name)
    except AttributeError:
        raise SystemExit(f"roifs_worker: {target} has no function {name!r}") from None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python3 -m roifs_worker MODULE:FUNCTION | FILE.py:FUNCTION")
    if __name__ == "__main__":  # the user's `import roifs_worker` gets this copy, not a second
        sys.modules.setdefault("roifs_worker", sys.modules["__main__"])
    _reserve_stdout()  # before the user's module runs
    run(_load(argv[0]))


if __name__ == "__main__":
    main()
