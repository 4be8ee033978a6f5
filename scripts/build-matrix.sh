#!/usr/bin/env bash
# Builds roifs as distributions do and runs the C unit tests (meson test) in each build:
# gcc and clang, each in release, debugoptimized, and plain with Debian's hardening flags,
# all with -Dwerror=true, in separate directories under ./build-matrix (or $ROIFS_MATRIX).
# First it checks that the project's defaults do not force -Werror (a packager's newer
# compiler must not break the build): meson.build leaves werror off, CI turns it on.
#   scripts/build-matrix.sh [CONFIG...]   CONFIG: gcc-release gcc-debugoptimized gcc-plain
#                                         clang-release clang-debugoptimized clang-plain
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
root=${ROIFS_MATRIX:-build-matrix}
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(gcc-release gcc-debugoptimized gcc-plain
                                     clang-release clang-debugoptimized clang-plain)
# Debian's dpkg-buildflags for a hardened package (bookworm)
hardening_cflags="-O2 -g -fstack-protector-strong -D_FORTIFY_SOURCE=2 -Wformat -Werror=format-security"
hardening_ldflags="-Wl,-z,relro -Wl,-z,now"
mkdir -p "$root"

defaults=$root/defaults
[ -f "$defaults/build.ninja" ] || meson setup "$defaults" >/dev/null
werror=$(meson introspect --buildoptions "$defaults" |
    /usr/bin/python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "werror"))')
if [ "$werror" != False ]; then
    echo "matrix: meson.build's default options turn werror on (werror=$werror)" >&2
    exit 1
fi

status=0
for c in "${configs[@]}"; do
    cc=${c%%-*} type=${c#*-} dir=$root/$c log=$root/$c.log
    start=$(date +%s)
    if [ ! -f "$dir/build.ninja" ]; then
        if [ "$type" = plain ]; then
            env CC="$cc" CFLAGS="$hardening_cflags" LDFLAGS="$hardening_ldflags" \
                meson setup "$dir" --buildtype=plain -Dwerror=true >"$log" 2>&1
        else
            env CC="$cc" meson setup "$dir" --buildtype="$type" -Dwerror=true >"$log" 2>&1
        fi || { tail -n 40 "$log" >&2; echo "matrix: $c: meson setup FAILED" >&2; status=1; continue; }
    fi
    if ! ninja -C "$dir" >>"$log" 2>&1; then
        grep -E "error|warning" "$log" | head -n 40 >&2
        echo "matrix: $c: build FAILED (log: $log)" >&2
        status=1
        continue
    fi
    if ! meson test -C "$dir" --print-errorlogs >>"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "matrix: $c: unit tests FAILED (log: $log)" >&2
        status=1
        continue
    fi
    echo "matrix: $c: built warning-free with -Werror, unit tests pass ($(($(date +%s) - start)) s)" >&2
done
exit $status
