#!/usr/bin/env bash
# Builds actorlm with AddressSanitizer and UndefinedBehaviorSanitizer into
# ./build-asan (gcc, no CUDA, no benchmarks) and runs the CPU test suite under
# them: the unit tests and the HTTP server tests. Any sanitizer report aborts
# the process that made it, so the test it ran in fails. Extra arguments go to
# ctest (e.g. -R tokenizer). Not part of every CI run: see docs/TESTING.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACTORLM_ASAN_BUILD_DIR:-$root/build-asan}"
jobs="${ACTORLM_JOBS:-$(nproc)}"
start=$(date +%s)
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DACTORLM_SANITIZE=address,undefined -DACTORLM_CUDA=OFF -DACTORLM_BUILD_BENCH=OFF
fi
cmake --build "$build" --parallel "$jobs"
built=$(date +%s)

# halt_on_error/abort_on_error: the first report kills the process (the code is
# also built with -fno-sanitize-recover=all). Leaks count as errors too.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
cd "$build"
status=0
ctest --output-on-failure --parallel "$jobs" --timeout 1800 "$@" || status=$?
done_at=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((done_at - built)) s"
exit "$status"
