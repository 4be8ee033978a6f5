#!/usr/bin/env bash
# Configures (once) and builds roifs in ./build (or $ROIFS_BUILD) with meson and ninja. For
# developers and CI, warnings are errors (-Dwerror=true); meson.build itself leaves that off,
# so that a packager's newer compiler never breaks a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ROIFS_BUILD:-build}
[ -f "$build/build.ninja" ] || meson setup "$build" -Dwerror=true "$@" >/dev/null
ninja -C "$build" >/dev/null
echo "roifs: built $build/roifs" >&2
