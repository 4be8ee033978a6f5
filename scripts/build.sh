#!/usr/bin/env bash
# Configures (once) and builds roifs in ./build (or $ROIFS_BUILD) with meson and ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ROIFS_BUILD:-build}
[ -f "$build/build.ninja" ] || meson setup "$build" "$@" >/dev/null
ninja -C "$build" >/dev/null
echo "roifs: built $build/roifs" >&2
