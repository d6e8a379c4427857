#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into ./build-fuzz and runs
# each on its seed corpus for N seconds (default 20, what CI runs). Fails if
# any target crashes, leaks, hangs or trips a sanitizer; the input that did it
# is left in build-fuzz/artifacts/ and the log in build-fuzz/logs/.
#
#   scripts/fuzz.sh                  # 20 s per target, one after another
#   scripts/fuzz.sh 600              # a long run
#   scripts/fuzz.sh 600 --parallel   # all targets at once, under nice
#   scripts/fuzz.sh 60 tokenizer_fuzz gguf_file_fuzz   # only these targets
#   scripts/fuzz.sh 7200 --runs 1000000   # each target until 1M executions (or 2 h)
#
# ACTORLM_FUZZ_TIMEOUT (seconds, default 20): one input taking longer is a
# hang. Raise it for a long run at nice 19 beside builds, where a core can
# be away for longer than that (two false timeouts so far, docs/TESTING.md).
#
# New inputs that add coverage go to build-fuzz/corpus/<target>/ (kept between
# runs, never committed); the committed seeds in tests/fuzz/corpus/<target>/
# are only read. Crashing inputs worth keeping are copied there by hand,
# with a regression test beside the fix.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACTORLM_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds=20
parallel=0
runs=""
targets=()
next_is_runs=0
for arg in "$@"; do
  if ((next_is_runs)); then
    runs="$arg"
    next_is_runs=0
    continue
  fi
  case "$arg" in
    --parallel) parallel=1 ;;
    --runs) next_is_runs=1 ;;
    ''|*[!0-9]*) targets+=("$arg") ;;
    *) seconds="$arg" ;;
  esac
done
all_targets=(openai_request_fuzz envelope_fuzz gguf_file_fuzz tokenizer_fuzz chat_template_fuzz http_request_fuzz
             kv_chunk_fuzz kv_disk_file_fuzz node_gate_fuzz data_channel_fuzz constraint_fuzz)
((${#targets[@]})) || targets=("${all_targets[@]}")

# ccache shares objects between clones of the tree (see build.sh).
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DACTORLM_FUZZ=ON
fi
cmake --build "$build" --parallel "${ACTORLM_JOBS:-$(nproc)}" --target "${targets[@]}"

mkdir -p "$build/logs" "$build/artifacts"
# A report anywhere fails the run; leaks count.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

run_one() {
  local t="$1"
  local seeds="$root/tests/fuzz/corpus/$t"
  local work="$build/corpus/$t"
  mkdir -p "$work"
  local dict=()
  [[ -f "$root/tests/fuzz/$t.dict" ]] && dict=(-dict="$root/tests/fuzz/$t.dict")
  # -timeout: one input taking longer than this is a hang. -rss_limit_mb:
  # the tokenizer targets hold the 49k-token vocabulary under ASan.
  local limit=(-max_total_time="$seconds")
  [[ -n "${runs:-}" ]] && limit+=(-runs="$runs")
  "$build/tests/fuzz/$t" "$work" "$seeds" "${dict[@]}" "${limit[@]}" -timeout="${ACTORLM_FUZZ_TIMEOUT:-20}" \
    -rss_limit_mb=4096 -max_len=8192 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
    >"$build/logs/$t.log" 2>&1
}

summary() {
  local t="$1" rc="$2" took="$3"
  local runs
  runs=$(grep -a -o 'stat::number_of_executed_units: *[0-9]*' "$build/logs/$t.log" | tail -1 | grep -o '[0-9]*$' || echo "?")
  if [[ "$rc" == 0 ]]; then
    printf 'fuzz: %-22s ok      %10s executions in %s s\n' "$t" "$runs" "$took"
  else
    printf 'fuzz: %-22s FAILED (exit %s); log: %s\n' "$t" "$rc" "$build/logs/$t.log"
    grep -E 'ERROR|SUMMARY|Test unit written|runtime error' "$build/logs/$t.log" | head -20 || true
  fi
}

failed=0
began=$(date +%s)
if ((parallel)); then
  declare -A pids
  for t in "${targets[@]}"; do
    nice -n 10 bash -c "$(declare -f run_one); build='$build' root='$root' seconds='$seconds' runs='$runs' run_one '$t'" &
    pids[$t]=$!
  done
  for t in "${targets[@]}"; do
    rc=0
    wait "${pids[$t]}" || rc=$?
    summary "$t" "$rc" "$(($(date +%s) - began))"
    ((rc == 0)) || failed=1
  done
else
  for t in "${targets[@]}"; do
    rc=0
    started=$(date +%s)
    run_one "$t" || rc=$?
    summary "$t" "$rc" "$(($(date +%s) - started))"
    ((rc == 0)) || failed=1
  done
fi
exit "$failed"
