#!/usr/bin/env python3
"""Mutation testing: do the tests notice when a known-important line breaks?

Each mutant below is one source edit that a correct test suite must reject.
The script copies the working tree (tracked and untracked, not ignored files)
into a scratch folder, configures one CPU-only build there, then for each
mutant: applies the edit, rebuilds only the targets its tests need, runs those
tests, and restores the file. A mutant is

  killed    its tests failed (or timed out): the suite guards that line;
  survived  its tests passed: no test notices the bug;
  error     its pattern was not found exactly once, it did not compile, or the
            unmutated tests already fail, so the run says nothing about it;
  skipped   an optional mutant whose code is absent from this tree (the file
            is being rewritten elsewhere); reported, never counted as killed.

Exit status: 0 only when every mutant that ran was killed (skips allowed);
1 when one survived or errored. The user's tree and ./build are never touched.

Usage: scripts/mutants.py [--list] [--workdir DIR] [-j N] [NAME ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Test sets: (targets to build, commands to run). Catch2 binaries run directly
# (no CTest discovery needed); process tests go through CTest because their
# command lines live in tests/**/CMakeLists.txt.
KV_TESTS = ["kvstore_kv_store_test", "kvstore_radix_cache_test",
            "kvstore_token_to_kv_pool_allocator_test", "kvstore_req_to_token_pool_test",
            "scheduler_scheduler_test", "actors_actor_kv_service_test"]
# The policy tests (stub worker, no model) check admission order step by step.
SCHED_TESTS = ["scheduler_scheduler_policy_test", "scheduler_scheduler_test"]
# All of tests/server's Catch2 binaries must exist before CTest runs anything
# there: catch_discover_tests turns an unbuilt one into a failing *_NOT_BUILT
# test, which would count as a kill.
SERVER_TESTS = sorted(f"server_{p.stem}" for p in (ROOT / "tests" / "server").glob("*_test.cpp"))
# The process tests one CTest command each, so one that already fails
# unmutated leaves the others to judge the mutant. --no-tests=error: a script
# that CMake does not register counts as failing, not as passing.
SERVER_PROCESS = [["ctest", "--test-dir", "{build}", "--output-on-failure", "--no-tests=error",
                   "-R", f"^server:{p.stem.removesuffix('_test')}$", "--timeout", "900"]
                  for p in sorted((ROOT / "tests" / "server").glob("*_test.py"))]


def catch_runs(targets: list[str]) -> list[list[str]]:
    runs = []
    for t in targets:
        folder = t.split("_", 1)[0]
        runs.append([f"{{build}}/tests/{folder}/{t}", "~[gpu]"])
    return runs


@dataclasses.dataclass
class Mutant:
    name: str
    what: str
    path: str
    old: str  # must occur exactly once in the file
    new: str
    targets: list[str]
    runs: list[list[str]]
    # Optional mutants are skipped (not an error) when `old` is absent, for
    # code another branch is rewriting; `anchor` must still be present, so a
    # renamed file or function is an error rather than a quiet skip.
    optional: bool = False
    anchor: str = ""


MUTANTS = [
    Mutant("evict-pages-not-tokens",
           "KvStore evicts short_pages tokens instead of short_pages * page_size",
           "kvstore/kv_store.cpp",
           "    evict(short_pages * allocator_.page_size());\n",
           "    evict(short_pages);\n",
           KV_TESTS, catch_runs(KV_TESTS)),
    Mutant("lpm-inverted",
           "the scheduler's lpm order puts the shortest cached prefix first",
           "scheduler/scheduler.cpp",
           "cached[a] != cached[b]) return cached[a] > cached[b];",
           "cached[a] != cached[b]) return cached[a] < cached[b];",
           SCHED_TESTS, catch_runs(SCHED_TESTS)),
    Mutant("api-key-chat-only",
           "the API key is checked only on /v1/chat/completions",
           "server/http_server.cpp",
           "    } else if (!(route && route->open)) {\n",
           "    } else if (route && route->id == RouteId::chat) {\n",
           ["actorlm", *SERVER_TESTS],
           # Every server test, C++ and process (server:*): whichever sends a
           # keyless request to another route (auth_matrix on main) kills it.
           catch_runs(SERVER_TESTS) + SERVER_PROCESS,
           optional=True, anchor="bearer_matches"),
    Mutant("release-keeps-lock",
           "RadixCache::release_req does not drop the request's lock reference",
           "kvstore/radix_cache_requests.cpp",
           '"release_req");\n  dec_lock_ref(last_node);\n',
           '"release_req");\n',
           KV_TESTS, catch_runs(KV_TESTS)),
    Mutant("evict-newest-first",
           "RadixCache::evict takes the most recently used leaf instead of the least",
           "kvstore/radix_cache.cpp",
           "    int32_t x = lru_.begin()->second;\n",
           "    int32_t x = std::prev(lru_.end())->second;\n",
           KV_TESTS, catch_runs(KV_TESTS)),
    Mutant("pages-ignore-partial",
           "pages_needed ignores the room left in a request's last partial page",
           "kvstore/token_to_kv_pool_allocator.cpp",
           "    pages += pages_for(seq_lens[i], page_size_) - pages_for(prefix_lens[i], page_size_);\n",
           "    pages += pages_for(seq_lens[i] - prefix_lens[i], page_size_);\n",
           KV_TESTS, catch_runs(KV_TESTS)),
]


def log(msg: str) -> None:
    print(f"[mutants {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd: list[str], cwd: Path, logfile: Path, timeout: float | None = None) -> int:
    """Runs cmd with its output in logfile; returns the exit status (124 on timeout)."""
    with open(logfile, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        try:
            return subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            out.write(f"timed out after {timeout} s\n")
            return 124


def copy_tree(src: Path, dst: Path) -> None:
    """Mirrors the working tree as git sees it (uncommitted edits included) into dst.

    Unchanged files keep their mtime so a reused scratch build rebuilds only
    what changed."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=src,
                           check=True, capture_output=True).stdout.decode().split("\0")
    wanted = {rel for rel in files if rel and (src / rel).is_file()}
    # Files gone from the tree go from the copy too: the build globs *.cpp.
    if dst.is_dir():
        for d in dst.rglob("*"):
            rel = d.relative_to(dst).as_posix()
            if d.is_file() and not rel.startswith("build-cpu/") and rel not in wanted:
                d.unlink()
    for rel in sorted(wanted):
        s, d = src / rel, dst / rel
        if d.is_file() and d.read_bytes() == s.read_bytes():
            continue
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="mutants to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    # Default under the repository root (ignored by /build*/): ccache's
    # base_dir then sees the same relative paths as a ./build-cpu build.
    ap.add_argument("--workdir", type=Path, default=ROOT / "build-mutants",
                    help="scratch folder (source copy + build); reused between runs")
    ap.add_argument("-j", type=int, default=2, help="build parallelism")
    ap.add_argument("--test-timeout", type=float, default=1200, help="seconds per test command")
    args = ap.parse_args()

    if args.list:
        for m in MUTANTS:
            print(f"{m.name:24} {m.path}: {m.what}")
        return 0
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        ap.error(f"unknown mutants: {', '.join(sorted(unknown))} (see --list)")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]

    src = args.workdir.resolve() / "src"
    build = src / "build-cpu"  # <src>/build-cpu: same relative layout as <root>/build-cpu
    logs = args.workdir.resolve() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # One run per scratch folder: two would rewrite each other's sources.
    lock = open(args.workdir.resolve() / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another mutants.py run is using {args.workdir}; pass another --workdir", file=sys.stderr)
        return 1
    for m in chosen:  # other mutants' logs from earlier runs stay
        for f in logs.glob(f"{m.name}.*.log"):
            f.unlink()
    # ccache shares objects with other builds at the same relative layout
    # only when the build directory is left out of the hash.
    os.environ.setdefault("CCACHE_NOHASHDIR", "1")

    log(f"copying {ROOT} into {src}")
    copy_tree(ROOT, src)
    if not (build / "build.ninja").is_file():
        # CPU-only and no benchmarks: every mutant is in code the CPU build
        # compiles, and nvcc would only add minutes.
        rc = run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
                  "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DACTORLM_CUDA=OFF", "-DACTORLM_BUILD_BENCH=OFF"],
                 src, logs / "configure.log")
        if rc != 0:
            log(f"configure failed, see {logs / 'configure.log'}")
            return 1

    def build_targets(m: Mutant, logfile: Path) -> bool:
        return run(["cmake", "--build", str(build), "--parallel", str(args.j), "--target", *m.targets],
                   src, logfile) == 0

    def run_test(cmd: list[str], logfile: Path) -> bool:
        return run([c.replace("{build}", str(build)) for c in cmd], src, logfile,
                   timeout=args.test_timeout) == 0

    # Each test command runs once unmutated, so a mutant's failure is its own.
    # Kept per command, not per mutant: the scheduler test (minutes) is shared.
    baseline: dict[tuple, tuple[str, Path]] = {}  # command -> (outcome, log)

    def baseline_of(m: Mutant) -> tuple[list[list[str]], list[str], str]:
        """(commands that pass unmutated, the failing ones' descriptions, log).

        A command that fails unmutated cannot tell a kill from its own
        failure, so the mutant is judged on the others and the report names
        what was left out."""
        todo = [cmd for cmd in m.runs if tuple(cmd) not in baseline]
        if todo:
            log(f"{m.name}: baseline (unmutated) build and {len(todo)} test command(s)")
            logfile = logs / f"{m.name}.baseline.log"
            built = build_targets(m, logfile)
            for cmd in todo:
                ok = built and run_test(cmd, logfile)
                baseline[tuple(cmd)] = ("pass" if ok else "fail" if built else "build-error", logfile)
        usable = [cmd for cmd in m.runs if baseline[tuple(cmd)][0] == "pass"]
        dropped = [f"{' '.join(cmd[-3:] if cmd[0] == 'ctest' else cmd[:1])}: {baseline[tuple(cmd)][0]}"
                   for cmd in m.runs if baseline[tuple(cmd)][0] != "pass"]
        logfile = next((str(baseline[tuple(cmd)][1]) for cmd in m.runs if baseline[tuple(cmd)][0] != "pass"), "")
        return usable, dropped, logfile

    def mutant_outcome(m: Mutant, runs: list[list[str]]) -> str:
        """'fail' at the first failing test command, else 'pass'; or 'build-error'."""
        logfile = logs / f"{m.name}.mutant.log"
        if not build_targets(m, logfile):
            return "build-error"
        return "pass" if all(run_test(cmd, logfile) for cmd in runs) else "fail"

    results: list[tuple[Mutant, str, str]] = []
    for m in chosen:
        path = src / m.path
        if not path.is_file():
            results.append((m, "error", f"{m.path} does not exist"))
            continue
        original = path.read_text()
        count = original.count(m.old)
        if count != 1:
            if m.optional and count == 0 and m.anchor and m.anchor in original:
                results.append((m, "skipped", f"pattern not in {m.path} (rewritten?); mutant not applied"))
                log(f"{m.name}: SKIPPED, pattern not found in {m.path}")
                continue
            results.append((m, "error", f"pattern found {count} times in {m.path}, expected once"))
            log(f"{m.name}: ERROR, pattern found {count} times")
            continue

        usable, dropped, base_log = baseline_of(m)
        note = f"; left out, failing unmutated: {', '.join(dropped)} (log: {base_log})" if dropped else ""
        if not usable:
            results.append((m, "error", f"no test command passes unmutated{note}"))
            log(f"{m.name}: ERROR, every test command fails unmutated")
            continue
        if dropped:
            log(f"{m.name}: judged without {len(dropped)} test command(s) that fail unmutated")

        log(f"{m.name}: applying to {m.path}")
        path.write_text(original.replace(m.old, m.new))
        try:
            outcome = mutant_outcome(m, usable)
        finally:
            path.write_text(original)
        status = {"fail": "killed", "pass": "survived", "build-error": "error"}[outcome]
        detail = {"killed": "tests failed", "survived": "all its tests passed",
                  "error": "mutant did not compile"}[status]
        results.append((m, status, f"{detail} (log: {logs}/{m.name}.mutant.log){note}"))
        log(f"{m.name}: {status.upper()}")

    print("\nmutant                   result    detail")
    for m, status, detail in results:
        print(f"{m.name:24} {status:9} {m.what}\n{'':34} {detail}")
    counts = {s: sum(1 for _, r, _ in results if r == s) for s in ("killed", "survived", "error", "skipped")}
    print("\n" + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["survived"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
