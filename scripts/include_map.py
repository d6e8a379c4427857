#!/usr/bin/env python3
"""The folder map of actorlm, drawn from the #include lines.

Every source folder sits on a layer; a file may include headers of its own
folder and of folders on lower layers only ("arrows point down"). This script
reads every `#include "<folder>/..."` of the tree, prints the map, writes it
into docs/ARCHITECTURE.md between its markers, and with --check fails when
  - an arrow points sideways or up (a folder including one on its own or a
    higher layer),
  - a folder with sources is on no layer (a new folder must be placed),
  - a file of a folder split into wings (cluster/) sits in none of them, or
  - the map in docs/ARCHITECTURE.md is not the one the includes draw.
CTest runs `--check` (tests/CMakeLists.txt), so a wrong-way arrow fails CI.

Usage: scripts/include_map.py [--check | --write]
"""
import argparse
import collections
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
BEGIN = "<!-- include-map: begin (scripts/include_map.py --write) -->"
END = "<!-- include-map: end -->"

# Lowest first. What each layer is for is in docs/ARCHITECTURE.md.
LAYERS = [
    ["kernels", "jinja"],
    ["kvstore", "messages", "model"],
    ["executor", "tokenizer"],
    ["grammar"],
    ["scheduler"],
    ["actors"],
    ["cluster/transport"],
    ["cluster/transfer"],
    ["cluster/roles", "server"],
    ["apps", "examples", "bench", "tests"],
]
# Folders split into wings of their own layers: a file there belongs to its
# wing, and so does a header it includes from there.
WINGS = {"cluster": ["transport", "transfer", "roles"]}
LAYER = {folder: i for i, folders in enumerate(LAYERS) for folder in folders}
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh")
# Not ours, or made by the build.
SKIP = {"build", ".git", "packaging", "scripts", "docs", "cmake"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([A-Za-z0-9_]+)/(?:([A-Za-z0-9_]+)/)?')


def source_folders():
    tops = sorted(p.name for p in ROOT.iterdir()
                  if p.is_dir() and p.name not in SKIP and not p.name.startswith((".", "build"))
                  and any(f.suffix in SOURCES for f in p.rglob("*")))
    out = []
    for top in tops:
        out += [f"{top}/{w}" for w in WINGS[top]] if top in WINGS else [top]
    return out


def folder_of(top, sub):
    """The map's folder for a path starting top/sub/ (sub: None for a file in top/)."""
    if top in WINGS:
        return f"{top}/{sub}" if sub in WINGS[top] else top
    return top


def arrows():
    """{(from, to): [files]} over every source file of every folder."""
    found = collections.defaultdict(list)
    for folder in source_folders():
        for f in sorted((ROOT / folder).rglob("*")):
            if f.suffix not in SOURCES or not f.is_file():
                continue
            for line in f.read_text(errors="replace").splitlines():
                m = INCLUDE.match(line)
                if not m or not (ROOT / m.group(1)).is_dir() or m.group(1) in SKIP:
                    continue
                dst = folder_of(m.group(1), m.group(2))
                if dst != folder:
                    rel = str(f.relative_to(ROOT))
                    if rel not in found[(folder, dst)]:
                        found[(folder, dst)].append(rel)
    return found


def problems(found):
    out = [f"{folder}/ is on no layer: add it to LAYERS in scripts/include_map.py"
           for folder in source_folders() if folder not in LAYER]
    for top, wings in WINGS.items():
        for f in sorted((ROOT / top).rglob("*")):
            rel = f.relative_to(ROOT / top)
            if f.suffix in SOURCES and f.is_file() and rel.parts[0] not in wings:
                out.append(f"{top}/{rel} is in none of {top}/'s wings ({', '.join(wings)})")
    for (src, dst), files in sorted(found.items()):
        if src in LAYER and dst in LAYER and LAYER[dst] >= LAYER[src]:
            way = "sideways" if LAYER[dst] == LAYER[src] else "up"
            out.append(f"{src}/ -> {dst}/ points {way} (layer {LAYER[src]} -> {LAYER[dst]}): {', '.join(files)}")
    return out


def render(found):
    # The folders only, not how many files: the table changes when an arrow
    # appears or goes, not with every include.
    lines = ["| layer | folder | includes headers of |", "|---:|---|---|"]
    for i, folders in reversed(list(enumerate(LAYERS))):
        for folder in folders:
            targets = sorted((dst for (src, dst) in found if src == folder), key=lambda d: (-LAYER.get(d, -1), d))
            deps = ", ".join(f"`{dst}/`" for dst in targets) or "nothing of ours"
            lines.append(f"| {i} | `{folder}/` | {deps} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail on a wrong-way arrow or a stale map")
    mode.add_argument("--write", action="store_true", help="write the map into docs/ARCHITECTURE.md")
    args = ap.parse_args()
    found = arrows()
    table = render(found)
    bad = problems(found)
    doc = DOC.read_text()
    if doc.count(BEGIN) != 1 or doc.count(END) != 1:
        sys.exit(f"{DOC}: the include-map markers are missing")
    head, rest = doc.split(BEGIN)
    _, tail = rest.split(END)
    fresh = f"{head}{BEGIN}\n{table}\n{END}{tail}"
    if args.write:
        DOC.write_text(fresh)
    else:
        print(table)
    for p in bad:
        print(f"include_map: {p}", file=sys.stderr)
    if args.check and fresh != doc:
        bad.append("stale")
        print(f"include_map: the map in {DOC.relative_to(ROOT)} is not the one the includes draw; "
              "run scripts/include_map.py --write", file=sys.stderr)
    if bad and (args.check or args.write):
        sys.exit(1)
    if args.check:
        print(f"include_map: {len(found)} folder arrows, all pointing down; docs/ARCHITECTURE.md is current")


if __name__ == "__main__":
    main()
