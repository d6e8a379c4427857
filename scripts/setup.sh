#!/usr/bin/env bash
# Installs what actorlm needs on a fresh Debian bookworm machine (as root) and
# fetches the default model. Safe to run again: it only installs what is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# curl and openssl: the two-node example and the cluster tests (certificates for mutual TLS).
# clang and libclang-rt-14-dev: the libFuzzer targets (scripts/fuzz.sh); the
# fuzzer and sanitizer runtimes are only a recommendation of clang, which
# --no-install-recommends skips.
# faketime: server:wall_clock runs a server whose wall clock races ahead.
packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  libcaf-dev libflatbuffers-dev flatbuffers-compiler zlib1g-dev nlohmann-json3-dev catch2
  libopenblas-dev libutf8proc-dev libboost-dev libedit-dev libssl-dev libxxhash-dev libucx-dev
  python3 python3-pip tmux chromium curl openssl clang libclang-rt-14-dev faketime
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "actorlm setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # An old or empty package list makes installs fail on fresh machines: refresh and retry once.
  apt-get install -y --no-install-recommends "${missing[@]}" ||
    { apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

# The HTTP tests use the official openai client, and the chat page test drives
# headless Chromium over the DevTools protocol with websocket-client, and the
# structured-output test validates with jsonschema (test-only,
# never runtime dependencies).
for mod in openai:openai websocket:websocket-client jsonschema:jsonschema; do
  if ! python3 -c "import ${mod%%:*}" 2>/dev/null; then
    echo "actorlm setup: installing the ${mod#*:} Python package (tests only)"
    python3 -m pip install --quiet "${mod#*:}" 2>/dev/null ||
      python3 -m pip install --quiet --break-system-packages "${mod#*:}"
  fi
done

bash "$here/fetch_model.sh"
# The tokenizer family tests compare with llama.cpp on its own vocabulary files.
bash "$here/fetch_vocabularies.sh" >/dev/null
# The structured-output engine's source (built into actorlm by CMake).
bash "$here/fetch_xgrammar.sh" >/dev/null
