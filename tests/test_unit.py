"""Runs each C unit test program built by meson (tests/unit/test_*.c) as one pytest test."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = (ROOT / os.environ.get("ROIFS_BUILD", "build")).resolve()
UNITS = sorted(p.stem for p in (ROOT / "tests" / "unit").glob("test_*.c"))


@pytest.mark.parametrize("name", UNITS)
def test_c_unit(name):
    exe = BUILD / "tests" / name
    assert exe.exists(), f"{exe} is not built: run scripts/build.sh"
    r = subprocess.run([str(exe)], cwd=BUILD / "tests", capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
