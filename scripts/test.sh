#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite.
# GPU tests ([gpu]) run only where nvidia-smi sees a GPU; elsewhere they are
# skipped with a message.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
build="${ACTORLM_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure --parallel "$(nproc)" --timeout 900 "$@"
