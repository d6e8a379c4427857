# Sourced by the fetch_*.sh scripts: downloads one sdist from PyPI's file
# host into a folder and checks its sha256.
#   pypi_sdist <file name> <sha256> <url> <folder> <what, for messages>
# Straight from the file host rather than `pip download`, which first
# installs an sdist's build backend to read its metadata (minutes on a fresh
# machine, and one more thing that can fail); pip stays the fallback when a
# <pip requirement> is given as a sixth argument.
pypi_sdist() {
  local file="$1" sha256="$2" url="$3" dir="$4" what="$5" requirement="${6:-}"
  echo "actorlm: fetching $what from PyPI" >&2
  if ! curl -fsSL --retry 3 -o "$dir/$file" "$url" &&
    ! { [[ -n "$requirement" ]] &&
      python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$dir" "$requirement" >&2; }; then
    echo "actorlm: could not download $what from PyPI; check network access to pypi.org" >&2
    return 1
  fi
  if ! echo "$sha256  $dir/$file" | sha256sum --check --status; then
    echo "actorlm: sha256 mismatch for $file (expected $sha256); refusing to use it" >&2
    return 1
  fi
}
