#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, -Dfuzz=true) in ./build-fuzz and runs each for
# SECONDS (default 20) on its seed corpus tests/fuzz-corpus/<name>/, which is never written:
# new inputs go to build-fuzz/corpus/<name>/, crashes to build-fuzz/crashes/.
#   fuzz/run.sh [SECONDS] [NAME...]      NAME: meta meta_v3 config roi namespace decode_none
#                                        decode_blosc decode_zlib decode_gzip decode_zstd
#                                        decode_v3
# Exits non-zero when a harness finds a crash, a leak, undefined behaviour or a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
secs=${1:-20}
[ $# -gt 0 ] && shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(meta meta_v3 config roi namespace decode_none decode_blosc
                                 decode_zlib decode_gzip decode_zstd decode_v3)
build=${ROIFS_FUZZ_BUILD:-build-fuzz}
if [ ! -f "$build/build.ninja" ]; then
    CC=clang meson setup "$build" -Dfuzz=true -Dbuildtype=debugoptimized >/dev/null
fi
if ! ninja -C "$build" "${names[@]/#/fuzz/fuzz_}" >"$build/fuzz-ninja.log" 2>&1; then
    cat "$build/fuzz-ninja.log" >&2
    exit 1
fi
mkdir -p "$build/crashes"
status=0
for n in "${names[@]}"; do
    seeds=tests/fuzz-corpus/$n
    work=$build/corpus/$n
    mkdir -p "$work"
    echo "fuzz: $n for ${secs}s" >&2
    # -timeout: one input taking seconds is a bug (a hang); -rss_limit_mb: a leak or a
    # decoder trusting a size from its input
    if ! "$build/fuzz/fuzz_$n" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/crashes/$n-" \
        "$work" "$seeds" 2>"$build/fuzz_$n.log"; then
        tail -n 60 "$build/fuzz_$n.log" >&2
        echo "fuzz: $n FAILED (log: $build/fuzz_$n.log, inputs: $build/crashes/$n-*)" >&2
        status=1
    else
        grep -E '^stat::number_of_executed_units|^stat::new_units_added' \
            "$build/fuzz_$n.log" | sed "s/^/fuzz: $n: /" >&2 || true
    fi
done
exit $status
