#!/usr/bin/env bash
# On the GPU machine, from the repository root, after the pieces of
# scripts/gpu/pack_prebuilt.sh arrived: unpacks the binaries, joins and
# checks the default model, then runs every [gpu] test and the benchmarks
# that compare this build with a baseline's (labels given as arguments).
# Logs go to $OUT (or ./gpu-out).
#   usage: bash scripts/gpu/run_prebuilt.sh [BASELINE_LABEL ...]
set -uo pipefail
root="$(pwd)"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out" /opt/actorlm-bin
tar -C /opt/actorlm-bin -xJf .devbin.tar.xz
bin=/opt/actorlm-bin/bin
cublas="$(find /usr/local /opt /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="/opt/actorlm-bin/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):${LD_LIBRARY_PATH:-}"
# The binaries look for fixtures under the source path they were built in.
src="$(cat /opt/actorlm-bin/source_dir)"
[[ -n "$src" && ! -e "$src" ]] && mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
cat .devmodel/model.gguf.part-* > /tmp/default.gguf
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  /tmp/default.gguf" | sha256sum --check || exit 1
export ACTORLM_MODEL=/tmp/default.gguf
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/device.txt"
status=0
for t in kernels_cuda_cuda_backend_test executor_cuda_executor_test actors_engine_test actors_actor_engine_test; do
  timeout 300 "$bin/$t" "[gpu]" > "$out/$t.txt" 2>&1
  rc=$?
  # Figures the tests print, failures with their context, the summary.
  grep -E -A8 "FAILED" "$out/$t.txt" | head -60
  grep -E "identical|refused|within|equal|passed|failed" "$out/$t.txt" | grep -v -E "^\.\./" | tail -25
  echo "== $t exit $rc"
  ((rc == 0)) || status=1
done
# Same GPU, same run: this build against each baseline, alternated.
for round in 1 2 3; do
  for label in "" "$@"; do
    suffix="${label:+.$label}"
    if [[ -n "${ACTORLM_DECODE8B:-}" ]]; then
      echo "== round $round ${label:-this build}: decode8b" | tee -a "$out/bench.txt"
      timeout 120 "$bin/cuda_bench$suffix" decode8b 2>&1 | tail -4 | tee -a "$out/bench.txt"
    fi
    [[ -x "$bin/actorlm$suffix" ]] || continue
    echo "== round $round ${label:-this build}: actorlm run -n 1000 --device cuda" | tee -a "$out/bench.txt"
    timeout 120 "$bin/actorlm$suffix" run --model /tmp/default.gguf --device cuda -n 1000 \
      -p "Write a long story about a lighthouse keeper." 2>&1 | grep -o "\[[0-9]* prompt tokens.*" | tee -a "$out/bench.txt"
  done
done
exit $status
