#!/usr/bin/env bash
# Packs, here, what a GPU machine needs to run the GPU tests and benchmarks
# without building anything there: the CUDA build's test and benchmark
# binaries (stripped) and the shared libraries they need that a CUDA image
# lacks (CAF, OpenBLAS, utf8proc, libedit) into .devbin.tar.xz, and the
# default model cut into pieces under .devmodel/ (each under a transfer's
# size; they travel in separate calls to a machine kept warm).
# scripts/gpu/run_prebuilt.sh is the other half.
#   usage: bash scripts/gpu/pack_prebuilt.sh [BUILD_DIR] [EXTRA_DIR=LABEL ...]
# EXTRA_DIR=LABEL adds that build's cuda_bench and actorlm as
# cuda_bench.LABEL and actorlm.LABEL (a baseline to compare on the same GPU).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build}"
shift || true
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in tests/executor/executor_cuda_executor_test tests/kernels/cuda/kernels_cuda_cuda_backend_test \
         tests/actors/actors_engine_test tests/actors/actors_actor_engine_test bench/cuda_bench apps/actorlm; do
  strip -o "$stage/bin/$(basename "$t")" "$build/$t"
done
for extra in "$@"; do
  dir="${extra%%=*}" label="${extra#*=}"
  strip -o "$stage/bin/cuda_bench.$label" "$dir/bench/cuda_bench"
  strip -o "$stage/bin/actorlm.$label" "$dir/apps/actorlm"
done
# Libraries outside glibc, libstdc++, OpenSSL, zlib and CUDA's own, which
# the GPU image has.
for b in "$stage"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|librt|libdl|libcrypto|libssl|libz)\.so|/cuda' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
echo "$root" > "$stage/source_dir"
tar -C "$stage" -cJf "$root/.devbin.tar.xz" bin lib source_dir
model="$(ACTORLM_CACHE="${ACTORLM_CACHE:-$HOME/.cache/actorlm}" bash "$root/scripts/fetch_model.sh" | tail -1)"
rm -rf "$root/.devmodel" && mkdir -p "$root/.devmodel"
split -b 57000000 "$model" "$root/.devmodel/model.gguf.part-"
ls -la "$root/.devbin.tar.xz" "$root/.devmodel"
