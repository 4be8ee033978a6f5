#!/usr/bin/env bash
# The demo: installs what is missing, builds roifs, mounts config/demo.ini, reads the result
# with zarr-python, prints a short summary and unmounts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec /usr/bin/python3 scripts/demo.py
