#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, then runs the C unit tests and the
# mounted end-to-end suite under pytest (Debian's /usr/bin/python3). Extra arguments go to
# pytest. ROIFS_SANITIZE=1 builds with -fsanitize=address,undefined in ./build-asan instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [ "${ROIFS_SANITIZE:-0}" = 1 ]; then
    export ROIFS_BUILD=build-asan ROIFS_BIN=$PWD/build-asan/roifs
    export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    scripts/build.sh -Db_sanitize=address,undefined -Db_lundef=false
else
    scripts/build.sh
fi
# zarrita.js and playwright-core (which drives Debian's chromium; never a browser download):
# installed again whenever package.json names a package node_modules lacks.
for dep in $(/usr/bin/python3 -c 'import json; print(*json.load(open("tests/js/package.json"))["dependencies"])'); do
    [ -d "tests/js/node_modules/$dep" ] || { npm install --prefix tests/js --no-audit --no-fund; break; }
done
# A private base directory: concurrent runs must not clean up each other's mounts.
base=$(mktemp -d /tmp/roifs-tests.XXXXXX)
exec /usr/bin/python3 -m pytest -p no:cacheprovider --basetemp "$base" tests "$@"
