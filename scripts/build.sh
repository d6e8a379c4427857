#!/usr/bin/env bash
# Configures and builds actorlm into ./build (Ninja, ccache). Extra arguments
# are passed to `cmake --build` (e.g. --target actorlm). ACTORLM_BUILD_DIR
# names another build folder; ACTORLM_CMAKE_ARGS (space-separated) adds
# configure options the first time that folder is configured.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACTORLM_BUILD_DIR:-$root/build}"
# ccache hashes the build folder into debug builds' keys unless told not to;
# without it ./build and ./build-cpu (scripts/test.sh) could share no object.
# Both sit directly under the root, so the relative source paths in their
# debug info stay right either way.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# And paths under the checkout are hashed relative to it, so a fresh clone in
# another folder (CI clones main afresh) reuses what an earlier one compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
if [[ ! -f "$build/build.ninja" ]]; then
  # shellcheck disable=SC2086  # word splitting of the options is the point
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${ACTORLM_CMAKE_ARGS:-}
fi
cmake --build "$build" --parallel "$(nproc)" "$@"
