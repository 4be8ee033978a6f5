#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, then runs the C unit tests and the
# mounted end-to-end suite under pytest (Debian's /usr/bin/python3). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec /usr/bin/python3 -m pytest -p no:cacheprovider tests "$@"
