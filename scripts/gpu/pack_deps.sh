#!/usr/bin/env bash
# Downloads (here, on a Debian bookworm machine with package access) the .debs
# a GPU machine without package access needs to build and test actorlm, into
# .devdeps/ (git-ignored). scripts/gpu/device_build.sh unpacks them there into
# a private prefix. About 30 MB: well inside a 64 MiB transfer with the tree.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$root/.devdeps"
mkdir -p "$out"
cd "$out"
# Headers and libraries the build finds (CAF, FlatBuffers + flatc, Catch2,
# nlohmann-json, OpenBLAS, utf8proc, Boost headers (Beast, Asio), libedit, zlib, OpenSSL
# headers) and the runtime libraries they pull in that a CUDA image lacks.
apt-get download \
  libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17 \
  libflatbuffers-dev libflatbuffers2 flatbuffers-compiler flatbuffers-compiler-dev \
  nlohmann-json3-dev catch2 \
  libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0 \
  libutf8proc-dev libutf8proc2 libboost1.74-dev \
  libedit-dev libedit2 libbsd0 libmd0 zlib1g-dev libssl-dev 2>&1 | grep -v "^Get:" || true
# The structured-output engine's source (grammar/), ~3 MB unpacked.
xgrammar="$(ACTORLM_CACHE="${ACTORLM_CACHE:-$HOME/.cache/actorlm}" bash "$root/scripts/fetch_xgrammar.sh")"
rm -rf "$out/xgrammar" && cp -r "$xgrammar" "$out/xgrammar"
du -sh "$out"
