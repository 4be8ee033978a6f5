#!/usr/bin/env bash
# The plate demo (docs/plates.md): installs what is missing, builds roifs, writes a small HCS
# plate, mounts config/fractal-plate.ini over it, reads every image's labels and the plate
# table, shows the plate map of `roifs status` and unmounts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec /usr/bin/python3 scripts/plate_demo.py
