"""roifs_worker: the name roifs's worker module had before it became roifs.worker; kept so
that scripts doing `from roifs_worker import run` and `python3 -m roifs_worker
MODULE:FUNCTION` work as before. Everything is roifs.worker's (one copy of its state)."""

import sys

import roifs.worker
from roifs.worker import Roi, main, run  # noqa: F401

__all__ = ["Roi", "run", "main"]

if __name__ == "__main__":
    sys.modules.setdefault("roifs_worker", roifs.worker)
    main()
else:
    sys.modules[__name__] = roifs.worker
