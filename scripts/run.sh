#!/usr/bin/env bash
# Installs what is missing, builds the `actorlm` command and runs the main job on
# the default model. Arguments go to `actorlm`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" >&2
bash "$root/scripts/build.sh" --target actorlm >&2
build="${ACTORLM_BUILD_DIR:-$root/build}"
exec "$build/apps/actorlm" "$@"
