#!/usr/bin/env bash
# bench/run.sh [name...] — runs the roifs benchmarks (all of them without a name), each
# measuring roifs and its alternative side by side, then rewrites bench/RESULTS.md from
# bench/results/*.json, the plots in bench/results/*.png and the notes in bench/notes/*.md.
#
# Names: seed seed_numpy segmentation small_rois scaling incremental apply labels masks overlay measure
# warm gaussian memory serve (the default set: every issue's benchmark, each with its alternative),
# or any other bench/<name>.py
# (e.g. proc_overhead, cache_cost, warm_cost), which runs the same way. bench/report.py then
# rewrites RESULTS.md, starting with the summary of every target from all results files.
# Environment: REPS=N overrides a benchmark's number of repeats; ROIFS_BENCH_TMP is the scratch
# directory (default /tmp/roifs-bench; memory needs about 11 GiB free there); ROIFS_BIN uses
# that binary instead of building ./build/roifs. Run as root (mounts, /sys/class/bdi).
set -euo pipefail
cd "$(dirname "$0")/.."
all=(seed seed_numpy segmentation small_rois scaling incremental apply labels masks overlay
     warm gaussian memory measure serve)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
for n in "${names[@]}"; do
    if [ ! -f "bench/$n.py" ] || [ "$n" = common ] || [ "$n" = report ]; then
        echo "bench/run.sh: unknown benchmark '$n' (known: ${all[*]})" >&2
        exit 2
    fi
done

scripts/install-deps.sh
# The plots (matplotlib), and the FUSE floor of bench/warm.py (squashfuse_ll over a squashfs
# image made by mksquashfs).
bench_pkgs=()
for p in python3-matplotlib squashfuse squashfs-tools; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || bench_pkgs+=("$p")
done
if [ ${#bench_pkgs[@]} -gt 0 ]; then
    echo "bench/run.sh: installing ${bench_pkgs[*]}" >&2
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${bench_pkgs[@]}" >/dev/null
fi

# Benchmark a private copy of the binary, so that a rebuild during the run changes nothing.
snap=$(mktemp -d /tmp/roifs-bench-bin.XXXXXX)
trap 'rm -rf "$snap"' EXIT
if [ -z "${ROIFS_BIN:-}" ]; then
    scripts/build.sh
    ROIFS_BIN=build/roifs
fi
cp "$ROIFS_BIN" "$snap/roifs"
# Build products that benchmarks find beside the binary (the example plugins).
if [ -d "$(dirname "$ROIFS_BIN")/examples/plugins" ]; then
    mkdir -p "$snap/examples"
    cp -r "$(dirname "$ROIFS_BIN")/examples/plugins" "$snap/examples/"
fi
export ROIFS_BIN="$snap/roifs"

status=0
for n in "${names[@]}"; do
    echo "=== bench/$n.py" >&2
    t0=$(date +%s)
    if ! /usr/bin/python3 "bench/$n.py"; then
        echo "bench/run.sh: $n failed" >&2
        status=1
    fi
    echo "=== bench/$n.py: $(( $(date +%s) - t0 )) s" >&2
done
/usr/bin/python3 bench/report.py
exit $status
