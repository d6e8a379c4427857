#!/usr/bin/env bash
# Builds the Debian package from a configured build folder (the CPU-only one:
# docs/DEPLOY.md says why) and checks it without installing it: the
# dependencies it declares, the files it holds, `actorlm version` run from
# the unpacked tree, and the service unit through systemd-analyze.
#
# Usage: scripts/check_package.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$build"
rm -f actorlm_*.deb actorlm-dev_*.deb
cpack -G DEB >/dev/null
deb=$(ls actorlm_*.deb)
dev=$(ls actorlm-dev_*.deb)
fail() { echo "check_package: $*" >&2; exit 1; }
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libcaf-core libcaf-io libcaf-openssl libopenblas libssl libc6 libstdc++6; do
  [[ "$depends" == *"$lib"* ]] || fail "Depends lacks $lib: $depends"
done
[[ "$depends" != *cuda* && "$depends" != *cublas* ]] || fail "Depends names CUDA: $depends"
files=$(dpkg-deb -c "$deb")
for f in ./usr/bin/actorlm ./usr/lib/systemd/system/actorlm-serve.service ./usr/share/actorlm/actorlm-serve.env \
         ./usr/share/doc/actorlm/DEPLOY.md; do
  grep -q " $f\$" <<<"$files" || fail "the package lacks $f"
done
dpkg-deb -I "$deb" postinst >/dev/null || fail "no postinst"
# The -dev package: what find_package(actorlm) and pkg-config need.
dev_files=$(dpkg-deb -c "$dev")
for f in ./usr/lib/cmake/actorlm/actorlmConfig.cmake ./usr/lib/pkgconfig/actorlm.pc ./usr/lib/actorlm/libactorlm_actors.a \
         ./usr/include/actorlm/actors/engine.hpp ./usr/include/actorlm/messages/request_generated.h; do
  grep -q " $f\$" <<<"$dev_files" || fail "the -dev package lacks $f"
done
[[ "$(dpkg-deb -f "$dev" Depends)" == *libcaf-dev* ]] || fail "the -dev package does not depend on libcaf-dev"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
dpkg-deb -x "$deb" "$scratch"
version=$("$scratch/usr/bin/actorlm" version | head -1)
[[ "$version" == "actorlm $(dpkg-deb -f "$deb" Version)" ]] || fail "'actorlm version' says '$version'"
if command -v systemd-analyze >/dev/null; then
  # The unit as installed, but starting the unpacked binary (verify checks
  # that ExecStart's program exists).
  mkdir -p "$scratch/units"
  sed "s|/usr/bin/actorlm|$scratch/usr/bin/actorlm|" "$scratch/usr/lib/systemd/system/actorlm-serve.service" \
    > "$scratch/units/actorlm-serve.service"
  systemd-analyze verify --man=no "$scratch/units/actorlm-serve.service" ||
    fail "systemd-analyze verify refused the unit"
fi
echo "check_package: $deb ($(du -h "$deb" | cut -f1)), $dev ($(du -h "$dev" | cut -f1)): Depends: $depends; '$version' from the unpacked tree; unit verified"
