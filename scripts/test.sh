#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite,
# then the CPU-only build under ASan+UBSan, TSan over the actors, cluster and
# scheduler, the portable build and its package, and the mutants (see
# below). GPU tests ([gpu]) run only where nvidia-smi sees a
# GPU; elsewhere they are skipped with a message. Arguments go to the ctest
# runs of build/ and the CPU-only build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Each stage's time and each CTest run's slowest tests are printed again when
# the script exits, pass or fail: CI shows only the end of the log, and a run
# that comes near its time limit must say where the time went.
summary="$(mktemp)"
trap 'echo "test.sh: where the time went ($(( $(date +%s) - started )) s in all):"; cat "$summary"; rm -f "$summary"' EXIT
started=$(date +%s)
step() { echo "test.sh: $1 took $(( $(date +%s) - $2 )) s" | tee -a "$summary"; }
# The ten slowest tests of the CTest run in build folder $1 (CTest's own
# record of each test's time), before the folder is pruned. `sed` rather than
# `head`: head exits after ten lines, and under pipefail the SIGPIPE that sort
# then takes (its output passes the pipe's 64 KiB once ~400 tests are listed)
# ended a green CI run with exit 141.
slowest() {
  local costs="$1/Testing/Temporary/CTestCostData.txt"
  [[ -f "$costs" ]] || return 0
  awk '/^---/ { exit } NF >= 3 { t = $NF; NF -= 2; printf "%9.1f s  %s\n", t, $0 }' "$costs" \
    | sort -rn | sed -n 1,10p >> "$summary"
}
t=$(date +%s)
bash "$root/scripts/setup.sh"
step "setup" "$t"
t=$(date +%s)
bash "$root/scripts/build.sh"
step "build/ (configure and build)" "$t"
build="${ACTORLM_BUILD_DIR:-$root/build}"
# ACTORLM_PRUNE_BUILDS=1 (.ci/run sets it) deletes each build folder once its
# stage is done. CI's disk is not ours to size: one run ran out of it linking
# the ASan build while build/ (4.3 GB, full debug info) was still there. The
# free space after each stage is printed either way.
prune() {
  if [[ "${ACTORLM_PRUNE_BUILDS:-0}" == 1 ]]; then rm -rf "$@"; fi
  echo "test.sh: $(df -h --output=avail "$root" | tail -1 | tr -d ' ') free on the checkout's disk"
}
# Where no GPU is visible and the ASan+UBSan build below runs every Catch2
# test, build/ runs only the process tests: its Catch2 run there was the same
# tests ([gpu] excluded) a second time, ~260 s of CI's wall time on 2 cores.
# (What it alone compiles, the `#if ACTORLM_HAVE_CUDA` branches, still builds
# here under -Werror; their tests are [gpu] and run where a GPU is.)
select=()
if [[ "${ACTORLM_SKIP_CPU_BUILD:-0}" != 1 && "${ACTORLM_CI_SANITIZERS:-1}" != 0 ]] \
    && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; }; then
  select=(-LE '^catch2$')
  echo "test.sh: no GPU visible; build/ runs its process tests, the ASan build every Catch2 test"
fi
t=$(date +%s)
status=0
(cd "$build" && ctest --output-on-failure --parallel "$(nproc)" --timeout 900 "${select[@]}" "$@") || status=$?
step "build/'s tests" "$t"
slowest "$build"
(( status == 0 )) || exit "$status"
# The embedding examples built out of tree against this build's install
# (find_package and pkg-config) and run: the install rules cannot rot.
t=$(date +%s)
bash "$root/scripts/check_embedding.sh" "$build"
step "the embedding check" "$t"
prune "$build" "$root/build-fuzz"

# Unless ACTORLM_SKIP_CPU_BUILD=1 (e.g. while iterating locally), the checks
# that keep the suite's guarantees from rotting (docs/TESTING.md, "CI"):
if [[ "${ACTORLM_SKIP_CPU_BUILD:-0}" != 1 ]]; then
  # The CPU-only configuration (-DACTORLM_CUDA=OFF), which is what a machine
  # without nvcc gets: the build above takes the CUDA branch of every
  # `#if ACTORLM_HAVE_CUDA` wherever nvcc exists, so only this build proves the
  # other branch compiles under -Werror. It is made with ASan and UBSan, so the
  # same build also proves no memory error, leak or undefined behaviour in
  # its Catch2 tests and in the process tests that feed the parsers hostile
  # input (label "parsers"); 14-18 minutes of tests on 2 cores (docs/TESTING.md,
  # "CI"). ACTORLM_CI_SANITIZERS=0 makes it a plain build running the Catch2
  # tests only (quicker, for local iteration; CI keeps the sanitizers).
  t=$(date +%s)
  if [[ "${ACTORLM_CI_SANITIZERS:-1}" != 0 ]]; then
    status=0
    bash "$root/scripts/sanitize.sh" --ci "$@" || status=$?
    step "the ASan+UBSan CPU-only build and its tests" "$t"
    slowest "${ACTORLM_ASAN_BUILD_DIR:-$root/build-asan}"
    (( status == 0 )) || exit "$status"
    prune "${ACTORLM_ASAN_BUILD_DIR:-$root/build-asan}"
  else
    cpu_build="${ACTORLM_CPU_BUILD_DIR:-$root/build-cpu}"
    ACTORLM_BUILD_DIR="$cpu_build" ACTORLM_CMAKE_ARGS="-DACTORLM_CUDA=OFF -DACTORLM_BUILD_BENCH=OFF" \
      bash "$root/scripts/build.sh"
    (cd "$cpu_build" && ctest --output-on-failure --parallel "$(nproc)" --timeout 900 -L catch2 "$@")
    step "the CPU-only build and its unit tests" "$t"
    prune "$cpu_build"
  fi
  # ThreadSanitizer over the actor, cluster and scheduler tests (their Catch2
  # binaries but the scheduler's real-model one; see scripts/tsan.sh).
  t=$(date +%s)
  status=0
  bash "$root/scripts/tsan.sh" --ci || status=$?
  step "the TSan build and its tests" "$t"
  slowest "${ACTORLM_TSAN_BUILD_DIR:-$root/build-tsan}"
  (( status == 0 )) || exit "$status"
  prune "${ACTORLM_TSAN_BUILD_DIR:-$root/build-tsan}"
  # A binary for any x86-64 (-DACTORLM_NATIVE=OFF): it once stopped compiling
  # under -Werror with nobody noticing, so it is built here and answers one
  # prompt on the CPU path this machine picks (its outputs agree with a
  # native build's to rounding only, so its speed and bits are measured in
  # docs/BENCHMARKS.md, not tested). The Debian package comes from this
  # build (docs/DEPLOY.md): neither sanitized nor tied to this machine's CPU.
  t=$(date +%s)
  portable_build="$root/build-portable"
  ACTORLM_BUILD_DIR="$portable_build" \
    ACTORLM_CMAKE_ARGS="-DACTORLM_CUDA=OFF -DACTORLM_NATIVE=OFF -DACTORLM_BUILD_TESTS=OFF -DACTORLM_BUILD_BENCH=OFF" \
    bash "$root/scripts/build.sh"
  "$portable_build/apps/actorlm" run --threads 2 --max-tokens 8 -p "Say hello." >/dev/null
  echo "actorlm: the -DACTORLM_NATIVE=OFF build runs"
  bash "$root/scripts/check_package.sh" "$portable_build"
  step "the portable build and the package" "$t"
  prune "$portable_build"
  # Mutants: known-important lines broken one at a time; each must fail a
  # test, and a mutant whose line changed fails the run.
  t=$(date +%s)
  python3 "$root/scripts/mutants.py" --ci
  step "the mutants" "$t"
fi
