#!/usr/bin/env bash
# Installs a configured build folder into a scratch prefix and builds the
# embedding examples out of tree against it, once with find_package(actorlm)
# and once with pkg-config, then runs them on the default model: the install
# rules, the package config and the .pc file cannot rot unnoticed.
#
# Usage: scripts/check_embedding.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "check_embedding: $*" >&2; exit 1; }
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
# CMake: find_package(actorlm) + actorlm::engine.
cmake -S "$root/tests/examples/out_of_tree" -B "$scratch/app" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DEXAMPLES_DIR="$root/examples" >/dev/null
cmake --build "$scratch/app" >/dev/null
for example in embedded_facade embedded_actors; do
  # Even from a CUDA build the engine links no CUDA library: it dlopens its
  # CUDA module only for device "cuda" (issue 32).
  if ldd "$scratch/app/$example" | grep -Eq 'libcu(da|dart|blas)'; then
    fail "$example links CUDA libraries: $(ldd "$scratch/app/$example" | grep -E 'libcu')"
  fi
  out=$("$scratch/app/$example") || fail "$example (find_package) exited with $?"
  grep -q Paris <<<"$out" || fail "$example (find_package) did not answer: $out"
done
# pkg-config: no CMake at all.
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
# shellcheck disable=SC2046  # the flags are meant to split
c++ -O1 -o "$scratch/facade_pc" "$root/examples/embedded_facade.cpp" $(pkg-config --cflags actorlm) \
  $(pkg-config --libs --static actorlm) || fail "embedded_facade does not build with pkg-config"
out=$("$scratch/facade_pc") || fail "embedded_facade (pkg-config) exited with $?"
grep -q Paris <<<"$out" || fail "embedded_facade (pkg-config) did not answer: $out"
echo "check_embedding: examples built out of tree against $(basename "$build")'s install (find_package and pkg-config) and answered"
