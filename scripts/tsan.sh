#!/usr/bin/env bash
# ThreadSanitizer run of the actor, cluster and scheduler tests: builds them
# into ./build-tsan (-fsanitize=thread, no CUDA, no benchmarks) and runs
# `ctest -L catch2 -R "^(actors|cluster|scheduler)_"`: their Catch2 tests, not the Python cluster tests (separate
# processes, minutes even uninstrumented). Any TSan report fails the run
# (halt_on_error, exit code 66); scripts/tsan.supp says what is suppressed
# and why (CAF itself is not instrumented).
#
# Usage: scripts/tsan.sh [--ci] [extra ctest arguments, e.g. -R engine_test]
#   --ci: what CI runs (scripts/test.sh): all of them but the scheduler's
#   real-model test binary (scheduler_scheduler_test: one thread drives the
#   model there, the CPU pool aside, and under TSan it alone takes ~20 min;
#   the actor tests run the same model through the actors' threads).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACTORLM_TSAN_BUILD_DIR:-$root/build-tsan}"
select=()
if [[ "${1:-}" == --ci ]]; then
  shift
  select=(-E '^scheduler_scheduler_test:')
fi
# Shared ccache objects with other clones of the tree (see build.sh).
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
# Every Catch2 test of tests/actors, tests/cluster and tests/scheduler, found from their
# sources so that a new test file is never silently left out (ctest would
# report it "Not Run").
targets=()
# A test's target is its path under tests/ with '_' for '/' (cmake/ActorlmLibrary.cmake).
while IFS= read -r src; do
  rel=${src#"$root"/tests/}
  rel=${rel%.cpp}
  targets+=("${rel//\//_}")
done < <(find "$root"/tests/actors "$root"/tests/cluster "$root"/tests/scheduler -name '*_test.cpp' | sort)
start=$(date +%s)
if [[ ! -f "$build/build.ninja" ]]; then
  # ACTORLM_SANITIZE: the same flags as the ASan build's (no recovery, frame
  # pointers, line tables only; see CMakeLists.txt).
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DACTORLM_SANITIZE=thread -DACTORLM_CUDA=OFF -DACTORLM_BUILD_BENCH=OFF
fi
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"
built=$(date +%s)
echo "tsan: build took $((built - start)) s"
# second_deadlock_stack for readable lock-order reports; the suppressions
# file lists only reports traced to uninstrumented system libraries.
# The actor engine test waits for real-model steps 10-20x slower than usual.
export ACTORLM_TEST_REPLY_TIMEOUT_S=3600
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$root/scripts/tsan.supp ${TSAN_OPTIONS:-}"
# UCX's memory hooks (libucm patches mmap, madvise and friends so that its
# registration cache hears of freed memory) call into TSan's interceptors
# from a thread TSan has not set up yet (glibc's madvise of a new thread's
# stack) and crash there. The data plane's UCX tests run without them: the
# cache is for RDMA registrations, which these tests (shared memory) do not make.
export UCX_MEM_MMAP_HOOK_MODE="${UCX_MEM_MMAP_HOOK_MODE:-none}"
cd "$build"
status=0
# Two at a time on CI's 2 cores, as the ASan stage runs them (stop 63, Zen 3: 138 tests in 313 s
# against ~490 s one at a time, all passing).
ctest -L catch2 -R "^(actors|cluster|scheduler)_" --parallel "$(nproc)" --output-on-failure --timeout 1800 \
  "${select[@]}" "$@" || status=$?
echo "tsan: tests took $(( $(date +%s) - built )) s (exit $status)"
exit $status
