#!/usr/bin/env bash
# Fetches llama.cpp's vocabulary-only GGUFs (models/ggml-vocab-*.gguf, ~75 MB:
# llama-spm, llama-bpe, qwen2, phi-3, deepseek, falcon, command-r, ...) once
# into the cache, for the tokenizer family tests. They ship in the
# llama-cpp-python 0.3.36 sdist on PyPI, whose sha256 is checked; each file's
# own sha256 is checked by the test against its fixture. Prints the folder.
set -euo pipefail
cache="${ACTORLM_CACHE:-$HOME/.cache/actorlm}"
dest="$cache/llama-vocab"
sdist="llama_cpp_python-0.3.36.tar.gz"
sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# Where PyPI's simple index (https://pypi.org/simple/llama-cpp-python/) points for it.
url="https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/$sdist"

if [[ -f "$dest/.complete" ]]; then
  echo "$dest"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/pypi_sdist.sh
source "$(dirname "${BASH_SOURCE[0]}")/pypi_sdist.sh"
pypi_sdist "$sdist" "$sha256" "$url" "$tmp" "llama.cpp's vocabulary files (llama-cpp-python==0.3.36 sdist)" \
  llama-cpp-python==0.3.36
mkdir -p "$dest"
tar -xzf "$tmp/$sdist" -C "$tmp" --wildcards 'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*.gguf'
mv "$tmp"/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*.gguf "$dest/"
touch "$dest/.complete"
echo "$dest"
