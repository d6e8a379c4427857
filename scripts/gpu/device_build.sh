#!/usr/bin/env bash
# On a GPU machine that cannot install packages (the lent H100/H200): unpacks
# the .debs from scripts/gpu/pack_deps.sh into a private prefix, builds the
# CUDA tests, benchmarks and the actorlm binary into build-gpu/, and prints
# the environment line later commands need. Targets to build may be given as
# arguments (default: everything the GPU tests and benchmarks use).
#   usage: source <(bash scripts/gpu/device_build.sh [targets...] | tail -1)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
prefix=/opt/actorlm-deps
mkdir -p "$prefix"
for f in "$root"/.devdeps/*.deb; do dpkg -x "$f" "$prefix"; done
lib="$prefix/usr/lib/x86_64-linux-gnu"
# Unversioned names dpkg's maintainer scripts would have made.
ln -sf libopenblas.so.0 "$lib/openblas-pthread/libopenblas.so" 2>/dev/null || true
export PATH="$prefix/usr/bin:$PATH"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(kernels_cuda_cuda_backend_test executor_cuda_executor_test actors_actor_engine_test actors_engine_test actorlm cuda_bench)
fi
cmake -S "$root" -B "$root/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DACTORLM_BUILD_BENCH=ON -DACTORLM_XGRAMMAR_DIR="$root/.devdeps/xgrammar" >"$root/build-gpu.configure.log" 2>&1 || { cat "$root/build-gpu.configure.log"; exit 1; }
cmake --build "$root/build-gpu" --parallel "$(nproc)" --target "${targets[@]}"
echo "export PATH=\"$PATH\" LD_LIBRARY_PATH=\"$LD_LIBRARY_PATH\""
