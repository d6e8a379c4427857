#!/usr/bin/env bash
# Builds actorlm with AddressSanitizer and UndefinedBehaviorSanitizer into
# ./build-asan (gcc, no CUDA, no benchmarks) and runs tests under them. Any
# sanitizer report aborts the process that made it, so the test it ran in
# fails. Extra arguments go to ctest (e.g. -R tokenizer).
#
#   scripts/sanitize.sh                # every test of the build
#   scripts/sanitize.sh --ci           # what CI runs (scripts/test.sh): the Catch2
#                                      # tests and the process tests labelled
#                                      # "parsers" (tests/server/CMakeLists.txt)
#
# This is CI's CPU-only build: -DACTORLM_CUDA=OFF compiles the branch of every
# `#if ACTORLM_HAVE_CUDA` that a machine without nvcc builds, so one build
# proves both that branch and the absence of memory errors and undefined
# behaviour. See docs/TESTING.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACTORLM_ASAN_BUILD_DIR:-$root/build-asan}"
jobs="${ACTORLM_JOBS:-$(nproc)}"
select=()
if [[ "${1:-}" == --ci ]]; then
  shift
  select=(-L '^(catch2|parsers)$')
fi
start=$(date +%s)
ACTORLM_BUILD_DIR="$build" \
  ACTORLM_CMAKE_ARGS="-DACTORLM_SANITIZE=address,undefined -DACTORLM_CUDA=OFF -DACTORLM_BUILD_BENCH=OFF" \
  bash "$root/scripts/build.sh"
built=$(date +%s)

# halt_on_error/abort_on_error: the first report kills the process (the code is
# also built with -fno-sanitize-recover=all). Leaks count as errors too.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# CAF's own shutdown cycle, not ours: scripts/lsan.supp says which and why.
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"
cd "$build"
status=0
ctest --output-on-failure --parallel "$jobs" --timeout 1800 "${select[@]}" "$@" || status=$?
done_at=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((done_at - built)) s"
exit "$status"
