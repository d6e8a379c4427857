#!/usr/bin/env bash
# The GPU benchmarks recorded in docs/BENCHMARKS.md, in one go, on a machine
# where scripts/gpu/device_build.sh has built build-gpu/. Writes each part's
# output to $1 (default: ./gpu-bench).
#   usage: bash scripts/gpu/run_benchmarks.sh [OUT_DIR]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$root/gpu-bench}"
mkdir -p "$out"
bench="$root/build-gpu/bench/cuda_bench"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/device.txt"
"$bench" attention 2>&1 | tee "$out/attention.txt"
"$bench" decode8b 2>&1 | tee "$out/decode8b.txt"
echo "without CUDA graphs:" | tee -a "$out/decode8b.txt"
ACTORLM_CUDA_GRAPHS=0 "$bench" decode8b 2>&1 | tee -a "$out/decode8b.txt"
"$bench" prefill8b 2>&1 | tee "$out/prefill8b.txt"
# End to end against transformers on the same GPU, same random 1B-class model.
model=/tmp/actorlm_bench_llama1b
[[ -f "$model/config.json" ]] || python3 "$root/scripts/gpu/hf_generate_bench.py" make "$model"
for batch in 1 32; do
  python3 "$root/scripts/gpu/hf_generate_bench.py" run "$model" "$batch" 128 128 2>&1 | grep -v Warning | tee -a "$out/e2e.txt"
  "$bench" e2e "$model" "$batch" 128 128 2>&1 | tee -a "$out/e2e.txt"
  echo -n "without CUDA graphs: " | tee -a "$out/e2e.txt"
  ACTORLM_CUDA_GRAPHS=0 "$bench" e2e "$model" "$batch" 128 128 2>&1 | tee -a "$out/e2e.txt"
done
