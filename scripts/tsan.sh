#!/usr/bin/env bash
# Builds roifs with ThreadSanitizer in ./build-tsan (or $ROIFS_TSAN_BUILD) and runs the unit
# tests of the threaded parts (engine, input reader, processors). Any race report fails.
# Suppressions, each with the reason it is needed, live in suppressions/tsan.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build=${ROIFS_TSAN_BUILD:-build-tsan}
tests=(test_engine test_engine_stress test_input test_input_dir test_proc_builtin test_proc_command
       test_proc_worker test_proc_plugin test_slurm test_versions test_pyramid test_cache test_namespace
       test_codeid test_engine_fail test_engine_withdraw)
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized -Dwerror=true \
        >/dev/null
fi
# everything: test_proc_plugin also loads the example plugins
if ! ninja -C "$build" >"$build/tsan-ninja.log" 2>&1; then
    cat "$build/tsan-ninja.log" >&2
    exit 1
fi
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4 exitcode=66 \
suppressions=$PWD/suppressions/tsan.supp ${TSAN_OPTIONS:-}"
status=0
for t in "${tests[@]}"; do
    log=$build/$t.tsan.log
    start=$(date +%s)
    if (cd "$build/tests" && timeout 600 "./$t") >"$log" 2>&1; then
        echo "tsan: $t clean ($(($(date +%s) - start)) s)" >&2
    else
        rc=$?
        tail -n 80 "$log" >&2
        echo "tsan: $t FAILED with status $rc (log: $log)" >&2
        status=1
    fi
done
exit $status
