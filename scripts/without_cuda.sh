#!/usr/bin/env bash
# Runs a command as if the CUDA toolkit were not installed, to check what a
# machine without nvcc builds (docs/TESTING.md, "Configurations"). Needs root
# (a private mount namespace); nothing changes outside the command.
#
#   bash scripts/without_cuda.sh cmake -S . -B /tmp/nocuda -G Ninja
#
# Dropping cuda from PATH is not enough: cmake/ActorlmCuda.cmake also looks at
# /usr/local/cuda/bin/nvcc by name, and some images put an nvcc wrapper in
# /usr/local/bin. So inside the namespace /usr/local/cuda (and the versioned
# folder it links to) is an empty tmpfs and every other nvcc on PATH is
# covered by /dev/null, which is not executable.
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
# shellcheck disable=SC2016  # the inner script expands its own variables
exec unshare -m --propagation private bash -c '
  set -euo pipefail
  if [[ -e /usr/local/cuda ]]; then mount -t tmpfs none /usr/local/cuda; fi
  PATH="$(tr : "\n" <<<"$PATH" | grep -v cuda | paste -sd:)"
  IFS=: read -ra dirs <<<"$PATH"
  for d in "${dirs[@]}"; do
    if [[ -f "$d/nvcc" && -x "$d/nvcc" ]]; then mount --bind /dev/null "$d/nvcc"; fi
  done
  export PATH CUDACXX=
  exec "$@"' bash "$@"
