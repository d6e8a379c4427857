#!/usr/bin/env bash
# Fetches the source of xgrammar 0.2.8 (Apache-2.0), the structured-output
# engine SGLang and vLLM use, once into the cache: its C++ core is built into
# actorlm (cmake/ActorlmXgrammar.cmake) for constrained decoding
# (response_format, regex, ebnf). It ships as the sdist on PyPI, whose sha256
# is checked, and patched with scripts/patches/xgrammar-$version-*.patch (ours:
# fixes found by fuzzing, each explained in its file). Prints the source folder,
# whose name carries the patch set's level so that a cache made before a patch
# was added is not reused.
set -euo pipefail
cache="${ACTORLM_CACHE:-$HOME/.cache/actorlm}"
version="0.2.8"
# Raise it with every change to the patch set (cmake/ActorlmXgrammar.cmake
# expects the same).
level="p1"
dest="$cache/xgrammar-$version-$level"
patches=("$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/patches/xgrammar-$version-"*.patch)
sdist="xgrammar-$version.tar.gz"
sha256="8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80"
# Where PyPI's simple index (https://pypi.org/simple/xgrammar/) points for it.
url="https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/$sdist"

if [[ -f "$dest/.complete" ]]; then
  echo "$dest"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/pypi_sdist.sh
source "$(dirname "${BASH_SOURCE[0]}")/pypi_sdist.sh"
pypi_sdist "$sdist" "$sha256" "$url" "$tmp" "xgrammar==$version (sdist)"
mkdir -p "$cache"
rm -rf "$dest"
tar -xzf "$tmp/$sdist" -C "$tmp"
for p in "${patches[@]}"; do
  # git apply works outside a repository, like patch(1), which a bare machine
  # may lack; --check first so that a patch that does not apply fails whole.
  (cd "$tmp/xgrammar-$version" && git apply --check -p1 "$p" && git apply -p1 "$p")
done
mv "$tmp/xgrammar-$version" "$dest"
echo "$level" > "$dest/.actorlm-patch-level"
touch "$dest/.complete"
echo "$dest"
