"""roifs._traceback: a user's exception shown as Python itself would show it, without the
frames of roifs's own modules and of importlib's machinery that lead to the user's code."""

import importlib
import os
import traceback

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_IMPORTLIB_DIR = os.path.dirname(os.path.abspath(importlib.__file__))


def _is_plumbing(filename):
    """roifs's own modules and importlib's frozen frames (`<frozen importlib._bootstrap>`)."""
    if filename.startswith("<frozen importlib"):
        return True
    return os.path.dirname(os.path.abspath(filename)) in (_OWN_DIR, _IMPORTLIB_DIR)


def format_user_exception(exc):
    """The text `python3 FILE.py` prints for exc: 'Traceback (most recent call last):', the
    frames from the user's first one on, then the exception (a SyntaxError in the user's file:
    only its place and caret, as Python prints it). Chained exceptions keep their own frames."""
    te = traceback.TracebackException.from_exception(exc)
    frames = list(te.stack)
    first = 0
    while first < len(frames) and _is_plumbing(frames[first].filename):
        first += 1
    te.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(te.format())
