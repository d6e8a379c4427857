#!/usr/bin/env bash
# Fetches the source of xgrammar 0.2.8 (Apache-2.0), the structured-output
# engine SGLang and vLLM use, once into the cache: its C++ core is built into
# actorlm (cmake/ActorlmXgrammar.cmake) for constrained decoding
# (response_format, regex, ebnf). It ships as the sdist on PyPI, whose sha256
# is checked. Prints the source folder.
set -euo pipefail
cache="${ACTORLM_CACHE:-$HOME/.cache/actorlm}"
version="0.2.8"
dest="$cache/xgrammar-$version"
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
mv "$tmp/xgrammar-$version" "$dest"
touch "$dest/.complete"
echo "$dest"
