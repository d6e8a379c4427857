#!/usr/bin/env python3
"""Mutation testing: do the tests notice when a known-important line breaks?

Each mutant below is one source edit that a correct test suite must reject.
The script copies the working tree (tracked and untracked, not ignored files)
into a scratch folder, configures one build there as scripts/build.sh
configures ./build (so ccache hands it build/'s objects), then for each
mutant: applies the edit, rebuilds only the targets its tests need, runs those
tests in order until one fails, and restores the file. Each command's own
targets are built just before it runs (a mutant killed by its first command
links one binary, not six), and a Catch2 run stops at its first failed
assertion (-a). A test command that fails under a mutant is then run once
unmutated (its baseline, kept for the other mutants): only a command that
passes there kills the mutant. Under --ci there is no baseline run: CI's
earlier stages have just run every one of these tests green on the same
commit (the Catch2 tests under ASan, the process tests in build/), and the
baselines were about a fifth of the stage's time (217 of ~1,090 s in
the CI log of stop 62). A mutant is

  killed    a test command failed (or timed out) that passes unmutated: the
            suite guards that line;
  survived  its tests passed: no test notices the bug;
  error     its pattern was not found exactly once (the code changed: update
            the mutant), it did not compile, or every command that failed
            under it fails unmutated too, so the run says nothing about it.

Exit status: 0 only when every mutant was killed; 1 otherwise. The user's
tree and ./build are never touched.

Usage: scripts/mutants.py [--list] [--ci] [--check-patterns] [--workdir DIR] [-j N] [NAME ...]
  --ci: the mutants CI runs (scripts/test.sh), those whose tests take seconds.
  --check-patterns: no build, only that each mutant's line is there once.
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
def ctest_run(name: str) -> list[str]:
    return ["ctest", "--test-dir", "{build}", "--output-on-failure", "--no-tests=error",
            "-R", f"^{name}$", "--timeout", "900"]


# The auth matrix first: it is the test meant to catch an auth mutant, and a
# mutant's run stops at its first failing command.
SERVER_PROCESS = [ctest_run(f"server:{stem}") for stem in
                  sorted((p.stem.removesuffix("_test") for p in (ROOT / "tests" / "server").glob("*_test.py")),
                         key=lambda stem: stem != "auth_matrix")]
CLUSTER_PD_TESTS = ["cluster_transfer_kv_receiver_test", "cluster_transfer_kv_transfer_test"]
HOST_TIER_TESTS = ["kvstore_kv_host_store_test", "kvstore_kv_disk_store_test", "scheduler_kv_tiers_test"]
GRAMMAR_TESTS = ["grammar_constraint_test"]


def catch_runs(targets: list[str], spec: str = "~[gpu]") -> list[list[str]]:
    """Runs of Catch2 binaries. -w NoTests: a spec that matches no test case
    fails (unmutated too, so the mutant is an error), never passes having run
    nothing. Commas in a test name are escaped: Catch2 splits specs at them."""
    runs = []
    for t in targets:
        runs.append([f"{{build}}/tests/{test_folder(t)}/{t}", "-a", "-w", "NoTests", spec.replace(",", "\\,")])
    return runs


def test_folder(target: str) -> str:
    """Where a test binary lives under build/tests: its source's folder under
    tests/ (the target is that path with '_' for '/', cmake/ActorlmLibrary.cmake)."""
    for src in (ROOT / "tests").rglob("*_test.cpp"):
        rel = src.relative_to(ROOT / "tests")
        if str(rel.with_suffix("")).replace("/", "_") == target:
            return str(rel.parent)
    raise SystemExit(f"mutants: no test source makes the target {target}")


@dataclasses.dataclass
class Mutant:
    name: str
    what: str
    path: str
    old: str  # must occur exactly once in the file
    new: str
    targets: list[str]
    runs: list[list[str]]
    # CI runs these (scripts/test.sh): their killing tests take seconds.
    ci: bool = True


MUTANTS = [
    Mutant("evict-pages-not-tokens",
           "KvStore evicts short_pages tokens instead of short_pages * page_size",
           "kvstore/kv_store.cpp",
           "    free_rows(radix_.evict(short_pages * allocator_.page_size(), ",
           "    free_rows(radix_.evict(short_pages, ",
           KV_TESTS, catch_runs(KV_TESTS)),
    Mutant("lpm-inverted",
           "the scheduler's lpm order puts the shortest cached prefix first",
           "scheduler/queue_policy.cpp",
           "cached_a != cached_b) return cached_a > cached_b;",
           "cached_a != cached_b) return cached_a < cached_b;",
           SCHED_TESTS, catch_runs(SCHED_TESTS)),
    Mutant("api-key-chat-only",
           "the API key is checked only on /v1/chat/completions",
           "server/http_server.cpp",
           "    } else if (!(route && route->open)) {\n",
           "    } else if (route && route->id == http::RouteId::chat) {\n",
           ["actorlm", *SERVER_TESTS],
           # Every server test, C++ and process (server:*): whichever sends a
           # keyless request to another route kills it; auth_matrix runs first.
           catch_runs(SERVER_TESTS) + SERVER_PROCESS),
    Mutant("release-keeps-lock",
           "RadixCache::release_req does not drop the request's lock reference",
           "kvstore/radix_cache_requests.cpp",
           '"release_req");\n  dec_lock_ref(last_node);\n',
           '"release_req");\n',
           KV_TESTS, catch_runs(KV_TESTS)),
    Mutant("evict-newest-first",
           "RadixCache::evict takes the most recently used leaf instead of the least",
           "kvstore/radix_cache.cpp",
           "    int32_t x = std::get<2>(*leaves_.begin());\n",
           "    int32_t x = std::get<2>(*std::prev(leaves_.end()));\n",
           KV_TESTS, catch_runs(KV_TESTS)),
    Mutant("evict-ignores-priority",
           "--radix-eviction-policy priority evicts by age alone",
           "kvstore/radix_cache.cpp",
           "  if (policy_ == EvictionPolicy::priority) measure = n.priority;\n",
           "",
           KV_TESTS, catch_runs(KV_TESTS)),
    Mutant("lfu-counts-probes",
           "a lookup that admits nothing (the scheduler ranking its queue) counts as a hit for lfu",
           "kvstore/radix_cache.cpp",
           "    if (use.hit) credit(child, true, use.priority);\n",
           "    credit(child, true, use.priority);\n",
           KV_TESTS, catch_runs(KV_TESTS)),
    Mutant("pages-ignore-partial",
           "pages_needed ignores the room left in a request's last partial page",
           "kvstore/token_to_kv_pool_allocator.cpp",
           "    pages += pages_for(seq_lens[i], page_size_) - pages_for(prefix_lens[i], page_size_);\n",
           "    pages += pages_for(seq_lens[i] - prefix_lens[i], page_size_);\n",
           KV_TESTS, catch_runs(KV_TESTS)),
    # Prefill/decode disaggregation: what a decode node checks before a
    # request's KV counts as arrived.
    Mutant("pd-commit-incomplete",
           "a PD ticket's commit is accepted with layer-token rows still missing",
           "cluster/transfer/kv_receiver.cpp",
           "  if (!it->second.assembly.complete()) {\n",
           "  if (false) {\n",
           CLUSTER_PD_TESTS, catch_runs(CLUSTER_PD_TESTS[:1])),
    Mutant("pd-repeat-accepted",
           "a PD transfer takes a chunk whose range it already has",
           "cluster/transfer/kv_transfer.cpp",
           "      if (have_[at(l, t)]) return \"KV chunk repeats layer \"",
           "      if (false) return \"KV chunk repeats layer \"",
           CLUSTER_PD_TESTS, catch_runs(CLUSTER_PD_TESTS[:1])),
    Mutant("chunk-crc-unchecked",
           "a KV chunk's data CRC is not checked (the envelope's CRC still is)",
           "cluster/transfer/kv_transfer.cpp",
           "  if (crc_of(out.data) != c.data_crc32()) return fail(",
           "  if (false) return fail(",
           CLUSTER_PD_TESTS,
           catch_runs(CLUSTER_PD_TESTS[1:], "Damaged, foreign, misfitting and repeated KV chunks are refused")),
    Mutant("pd-fence-open",
           "a PD transfer dropped with a chunk's write in flight lets its request go at once",
           "cluster/transfer/kv_receiver.cpp",
           "  if (it->second.writing > 0) {\n    it->second.dropped = true;\n",
           "  if (false) {\n    it->second.dropped = true;\n",
           CLUSTER_PD_TESTS, catch_runs(CLUSTER_PD_TESTS[:1])),
    # The data plane: a frame's payload must pass its tag before its
    # transfer may be committed.
    Mutant("data-tag-unchecked",
           "a data plane payload is taken whatever its AES-GCM tag says",
           "cluster/transport/data_channel.cpp",
           '    fail_if(EVP_DecryptFinal_ex(ctx, none, &len) != 1, "a data plane payload fails its tag");\n',
           "    (void)EVP_DecryptFinal_ex(ctx, none, &len);\n",
           ["cluster_transport_data_channel_test"],
           catch_runs(["cluster_transport_data_channel_test"], "Every flipped byte of a data plane frame is caught")),
    # PD streaming: a prompt's KV goes while later chunks compute, so its
    # rows must outlive whatever ends it early, and a wait must keep the
    # connection alive.
    Mutant("streamed-rows-freed-at-finish",
           "a streaming prompt that ends at its first token lets its rows go while its transfer may read them",
           "scheduler/scheduler.cpp",
           "    if (it == running_.end() || it->streamed == 0) continue;\n    held_.push_back(std::move(*it));",
           "    if (it == running_.end() || it->streamed >= 0) continue;\n    held_.push_back(std::move(*it));",
           ["scheduler_scheduler_test"],
           catch_runs(["scheduler_scheduler_test"], "[pd_stream]")),
    Mutant("stream-keepalive-unsent",
           "a transfer waiting for a prompt's next rows sends nothing, and the decode node times it out",
           "cluster/transfer/kv_data_plane.cpp",
           "(\"cancelled\");\n          c->out.send({reinterpret_cast<const uint8_t*>(kKeepalive), kKeepaliveHeader}, {});",
           "(\"cancelled\");\n          (void)kKeepalive;",
           ["cluster_transfer_kv_data_plane_test"],
           catch_runs(["cluster_transfer_kv_data_plane_test"], "A fed transfer sends rows as they are computed, stays alive while it waits, and fills the reserved rows exactly")),
    Mutant("stream-ignores-layer-clock",
           "a streamed chunk is read as soon as it is announced, before its step has stored its layers",
           "cluster/transfer/kv_data_plane.cpp",
           "      if (steps[i] != 0) {\n",
           "      if (steps[i] == ~uint64_t{0}) {\n",
           ["cluster_transfer_kv_data_plane_test"],
           catch_runs(["cluster_transfer_kv_data_plane_test"], "A fed chunk of a step in progress goes once the step has stored its layers, not before")),
    Mutant("host-tier-plain-lru",
           "a block back after the host tier let it go always pushes out the least recently used one, so a cycle longer than the tier never hits",
           "kvstore/kv_host_store.cpp",
           "  const bool returning = ghosts_.count(key) > 0;\n",
           "  const bool returning = ghosts_.count(key) > 0 && false;\n",
           ["kvstore_kv_host_store_test"],
           catch_runs(["kvstore_kv_host_store_test"], "Prompts coming back in a cycle longer than the host tier still hit for the part it holds")),
    Mutant("kept-connection-outlives-session",
           "a data plane connection kept between transfers carries chunks after the join it proved has ended",
           "cluster/transfer/kv_data_plane.cpp",
           "      if (!cfg_.sessions->key(session)) return fail(",
           "      if (false) return fail(",
           ["cluster_transfer_kv_data_plane_test"],
           catch_runs(["cluster_transfer_kv_data_plane_test"], "Transfers to one data port take turns on a kept connection, silent between them past the timeout for a peer gone, and one the port closed or of a session that ended is not used again")),
    Mutant("kept-connection-timed-out-as-peer-gone",
           "the data port gives a kept connection between transfers only the silent-peer timeout, so a long prefill makes the next transfer dial anew",
           "cluster/transfer/kv_data_plane.cpp",
           "      wait_between(served > 0 && !cfg_.receiver->expects_more(last_ticket));",
           "      wait_between(false && served > 0 && !cfg_.receiver->expects_more(last_ticket));",
           ["cluster_transfer_kv_data_plane_test"],
           catch_runs(["cluster_transfer_kv_data_plane_test"], "Transfers to one data port take turns on a kept connection, silent between them past the timeout for a peer gone, and one the port closed or of a session that ended is not used again")),
    Mutant("ring-never-offered",
           "the prefill node's UCX link never offers its ring, so the decode node copies every block in before opening it",
           "cluster/transport/ucx_link.cpp",
           "  const bool offer = impl_->ring && ",
           "  const bool offer = false && impl_->ring && ",
           ["cluster_transport_ucx_link_test"],
           catch_runs(["cluster_transport_ucx_link_test"], "Data plane frames cross a UCX link whole, sealed and on a trusted fabric")),
    Mutant("allocator-recycles-descending",
           "pages freed together are handed out again highest first, so a request on recycled rows moves its KV row by row",
           "kvstore/token_to_kv_pool_allocator.cpp",
           "  for (auto it = pages.rbegin(); it != pages.rend(); ++it) {\n",
           "  for (auto it = pages.begin(); it != pages.end(); ++it) {\n",
           ["kvstore_token_to_kv_pool_allocator_test"],
           catch_runs(["kvstore_token_to_kv_pool_allocator_test"], "Rows freed together come back in ascending runs")),
    # HiCache: the host and disk tiers' byte accounting against capacity.
    Mutant("host-tier-overfills",
           "the host tier makes room only once it is already over its capacity",
           "kvstore/kv_host_store.cpp",
           "  while (stats_.bytes + e.bytes > stats_.capacity_bytes) {\n",
           "  while (stats_.bytes > stats_.capacity_bytes) {\n",
           HOST_TIER_TESTS, catch_runs(HOST_TIER_TESTS)),
    # HiCache off the scheduler's thread: a block on its way down is still
    # there for a load.
    Mutant("tier-load-skips-queue",
           "a load does not look in the tiers' store queue (a block written through but not yet stored is missed)",
           "scheduler/kv_tiers.cpp",
           "  if (const Job* job = queued(prompt, block, lineage, &at)) {\n",
           "  if (const Job* job = nullptr) {\n",
           HOST_TIER_TESTS[2:], catch_runs(HOST_TIER_TESTS[2:])),
    # HiCache loads beside running streams: each step copies a budget of
    # blocks, so no stream waits for a whole prompt's KV.
    Mutant("tier-load-unbudgeted",
           "once a copy is timed, tier loads get no per-step budget (a prompt's blocks land in one step while streams decode)",
           "scheduler/scheduler.cpp",
           "  return static_cast<int64_t>(0.1 * last_step_seconds_ / load_seconds_per_byte_);\n",
           "  return std::numeric_limits<int64_t>::max();\n",
           ["scheduler_scheduler_test"], catch_runs(["scheduler_scheduler_test"], "While streams decode*")),
    # Failover: a request resumed elsewhere must continue, not restart.
    Mutant("resume-skips-constraint",
           "a resumed request's constraint starts from the beginning instead of walking the output it has",
           "scheduler/scheduler.cpp",
           "    if (r.constraint->complete() || !r.constraint->accept(r.output[i])) {\n",
           "    if (r.constraint->complete()) {\n",
           ["scheduler_scheduler_test"], catch_runs(["scheduler_scheduler_test"], "A request resumed*")),
    Mutant("failover-forgets-tokens",
           "the head does not record the tokens it passes on, so a lost node's request moves without them",
           "cluster/roles/router_actor.cpp",
           "      p->second.streamed.insert(p->second.streamed.end(), item->token_ids.begin(), item->token_ids.end());\n",
           "      (void)p;\n",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"])),
    Mutant("migration-skips-constraint",
           "a request migrating with its KV starts on the target without its constraint walked over its output",
           "scheduler/scheduler.cpp",
           "  if (auto why = start_constraint(r)) {\n    out.error = *why;\n    return out;\n  }\n  Running run;\n",
           "  Running run;\n",
           ["scheduler_scheduler_test"], catch_runs(["scheduler_scheduler_test"], "A decoding request migrated*")),
    Mutant("failed-step-fails-all",
           "a step the worker fails ends every request in it instead of running them again",
           "scheduler/scheduler.cpp",
           "    if (++q.step_failures >= 2) {\n",
           "    if (++q.step_failures >= 1) {\n",
           ["scheduler_scheduler_test"], catch_runs(["scheduler_scheduler_test"], "A step the worker fails*")),
    Mutant("disk-tier-overfills",
           "the disk tier makes room for half a block only",
           "kvstore/kv_disk_store.cpp",
           "  while (!index_.empty() && stats_.bytes + bytes > stats_.capacity_bytes) {\n",
           "  while (!index_.empty() && stats_.bytes + bytes / 2 > stats_.capacity_bytes) {\n",
           HOST_TIER_TESTS, catch_runs(HOST_TIER_TESTS)),
    # Structured output: a schema without "additionalProperties" still
    # admits only the keys it names (xgrammar's strict mode).
    Mutant("schema-not-strict",
           "json_schema masks let a model add keys the schema does not name",
           "grammar/constraint.cpp",
           "                                            /*strict_mode=*/true);\n",
           "                                            /*strict_mode=*/false);\n",
           GRAMMAR_TESTS, catch_runs(GRAMMAR_TESTS)),
    # Issue 36: rebalancing never moves a request over a gap too small to
    # leave the two nodes more even (it would move them back and forth).
    Mutant("rebalance-any-gap",
           "a rebalance moves a request from a node only one request busier than another",
           "cluster/roles/rebalancer.cpp",
           "  int32_t best_gap = min_gap - 1;\n",
           "  int32_t best_gap = 0;\n",
           ["cluster_roles_rebalancer_test"], catch_runs(["cluster_roles_rebalancer_test"])),
    # Issue 36: a worker actor the engine stopped is not started again (it
    # would outlive the engine, and keep its actor system from ending).
    Mutant("restart-after-stop",
           "an ended worker actor is started again even when the engine stopped it",
           "actors/actor_worker.cpp",
           "  if (stopped || !liveness_.restart ||",
           "  if (!liveness_.restart ||",
           ["actors_worker_liveness_test"], catch_runs(["actors_worker_liveness_test"], "A worker actor that ends*")),
    # Issue 38: a cluster's node has no tenants file; the weight each request
    # carries from the head is its only source of the share.
    Mutant("tenant-weight-ignored",
           "a node ignores the tenant weight a head's request carries (no fair share on cluster nodes)",
           "scheduler/scheduler.cpp",
           "  if (r.tenant > 0 && r.tenant_weight > 0) {\n",
           "  if (false) {\n",
           ["scheduler_scheduler_policy_test"],
           catch_runs(["scheduler_scheduler_policy_test"], "[tenants]")),
    # Issue 38: a tenant's KV quota is kept as its requests grow, not only at
    # admission; drafts are trimmed to it (a speculating request would
    # otherwise run past it by a verify's tokens).
    Mutant("kv-quota-unkept",
           "a tenant's running requests grow past its KV quota (only admission looks at it)",
           "scheduler/scheduler.cpp",
           "  keep_kv_quotas(events);\n  const int64_t preempted",
           "  const int64_t preempted",
           ["scheduler_scheduler_policy_test"],
           catch_runs(["scheduler_scheduler_policy_test"], "[tenants]")),
    Mutant("kv-quota-drafts-untrimmed",
           "a speculating request's drafts take its tenant past its KV quota",
           "scheduler/scheduler.cpp",
           "    const bool quota = config_.queue.kv_quota(t) > 0;\n",
           "    const bool quota = false;\n",
           ["scheduler_scheduler_policy_test"],
           catch_runs(["scheduler_scheduler_policy_test"], "[tenants]")),
    # Issue 36: a remote worker node that came back lost its KV; a prefix
    # cache still pointing into its rows would feed requests garbage.
    Mutant("reset-keeps-cache",
           "after the worker came back without its KV, the prefix cache still offers its rows",
           "scheduler/scheduler.cpp",
           "  running_.clear();\n  kv_.flush_cache();\n  memory_short_ = false;\n",
           "  running_.clear();\n  memory_short_ = false;\n",
           ["scheduler_scheduler_test"],
           catch_runs(["scheduler_scheduler_test"], "A worker that comes back without its KV*")),
    # Issue 37: a verify keeps a draft only where the target sampled it too;
    # keeping every draft changes the tokens (and the distribution).
    Mutant("spec-keeps-every-draft",
           "speculative decoding keeps drafts the target model did not sample",
           "scheduler/scheduler.cpp",
           "    const bool matches = j < p.drafts.size() && rows[j].token == p.drafts[j];\n",
           "    const bool matches = j < p.drafts.size();\n",
           ["scheduler_scheduler_policy_test"],
           catch_runs(["scheduler_scheduler_policy_test"], "Speculative sampling keeps*")),
    # Issue 37: rejected drafts' rows go back in the step that rejects them.
    Mutant("spec-keeps-rejected-rows",
           "a verify step's rejected drafts keep their KV rows, so later positions read them",
           "scheduler/scheduler.cpp",
           "  if (!cut.empty()) kv_.truncate(cut, cut_to);\n",
           "  if (false) kv_.truncate(cut, cut_to);\n",
           ["scheduler_scheduler_policy_test"],
           catch_runs(["scheduler_scheduler_policy_test"], "Speculative sampling keeps*")),
    # Issue 37: a step's drafts are chosen by the measured cost of each
    # step size; a straight line missed a jump in it (float32 products past
    # 32 rows), and at 8 streams drafting lost to plain decoding.
    Mutant("draft-cost-straight-line",
           "the drafts a step carries are chosen by one straight line through all step times",
           "scheduler/draft_cost.cpp",
           "  if (hi != p.end() && hi->first == rows) return hi->second;\n",
           "  if (!p.empty()) return fixed_seconds() + row_seconds() * static_cast<double>(rows);\n",
           ["scheduler_draft_cost_test"],
           catch_runs(["scheduler_draft_cost_test"], "Drafts stop where*")),
    # Issue 37: without probes the sizes a step does not take are never
    # measured, so a choice made on the first steps is never revisited.
    Mutant("draft-cost-never-probes",
           "the step sizes speculation does not choose are never measured again",
           "scheduler/draft_cost.cpp",
           "  if (steps_ - last_probe_ >= kProbeEvery || p.size() == 1) {\n",
           "  if (false) {\n",
           ["scheduler_draft_cost_test"],
           catch_runs(["scheduler_draft_cost_test"], "A size not seen*")),
    # Issue 37: a draft model skips plain decode steps; their tokens must
    # run before its next drafts, or it proposes from holes in its KV.
    Mutant("draft-catch-up-skipped",
           "a draft model drafts without running the tokens of the plain steps it skipped",
           "model/draft_model.cpp",
           "      if (known == 1 && joins(b->second)) {\n",
           "      if (false) {\n",
           ["model_model_runner_test"],
           catch_runs(["model_model_runner_test"], "A draft model skips*")),
    # Issue 38: LoRA adapters.
    Mutant("adapter-key-ignored",
           "an adapter's KV is keyed as the base model's, so a prefix is shared across adapters",
           "scheduler/request.hpp",
           "    for (int32_t& t : keys) t |= adapter << kAdapterKeyShift;",
           "    for (int32_t& t : keys) t |= 0;",
           ["scheduler_scheduler_test"],
           catch_runs(["scheduler_scheduler_test"], "[lora]")),
    Mutant("adapter-scale-shared",
           "a request at its own adapter scale matches and caches KV as if at the adapter's scale",
           "scheduler/request.hpp",
           "  bool shares_kv() const { return adapter_scale == 1.0f && stacked.empty(); }",
           "  bool shares_kv() const { return stacked.empty(); }",
           ["scheduler_scheduler_test"],
           catch_runs(["scheduler_scheduler_test"], "[lora]")),
    Mutant("table-across-tenants",
           "the n-gram table files a request's words under no tenant instead of its own",
           "scheduler/scheduler.cpp",
           "  ngram_table_->observe(text, table_space(q));",
           "  ngram_table_->observe(text, 0);",
           ["scheduler_scheduler_test"],
           catch_runs(["scheduler_scheduler_test"], "[ngram_table]")),
    Mutant("share-preempts-urgent",
           "a tenant below its share takes a place from a more urgent request",
           "scheduler/queue_policy.cpp",
           "    if (r.tenant != tenants[*over] || !movable[i] || rank(r) > rank(w)) continue;",
           "    if (r.tenant != tenants[*over] || !movable[i]) continue;",
           ["scheduler_scheduler_policy_test"],
           catch_runs(["scheduler_scheduler_policy_test"], "[tenants]")),
    Mutant("stacked-adapters-ignored",
           "a request's further adapters (a lora list naming several) are not applied",
           "model/model_runner.cpp",
           "      for (size_t k = 0; k < r.stacked_adapters.size(); ++k) {",
           "      for (size_t k = 0; k < 0 * r.stacked_adapters.size(); ++k) {",
           ["model_lora_adapter_test"],
           catch_runs(["model_lora_adapter_test"], "[lora]")),
    Mutant("lora-rows-shifted",
           "an adapter's update lands on the rows after its own in a mixed batch",
           "model/llama_model.cpp",
           "        slices.push_back({id, seg.row_begin, seg.rows, seg.scale});",
           "        slices.push_back({id, seg.row_begin + (seg.row_begin + seg.rows < x.rows ? 1 : 0), seg.rows, seg.scale});",
           ["model_lora_adapter_test"],
           catch_runs(["model_lora_adapter_test"], "[lora]")),
    # An adapter's KV in the tiers is keyed by its file's lineage: never
    # served to the base model (or the base model's to it).
    Mutant("adapter-tiers-unlineaged",
           "an adapter's prompt goes to (and comes from) the KV tiers as the base model's",
           "scheduler/scheduler.cpp",
           "  if (q.adapter == 0) return 0;\n",
           "  if (true) return 0;\n",
           ["scheduler_scheduler_test"],
           catch_runs(["scheduler_scheduler_test"], "[lora]")),
    # Issue 32: a request queued behind long steps is not stalled.
    Mutant("stall-ignores-steps",
           "Engine::generate fails a request after --stall-timeout even while steps complete",
           "actors/engine.cpp",
           "      if (steps != steps_seen) {\n",
           "      if (false) {\n",
           ["actorlm"], [ctest_run("server:slow_step")], ci=False),
    # A wall clock stepped forward is not silence (a CI run lost two workers
    # that way): the worker's deadline and the stall timeout are read from
    # the steady clock, caf::after only says when to look again.
    Mutant("liveness-on-wall-clock",
           "a worker is lost whenever a caf::after fires, which the wall clock can cut short",
           "actors/actor_worker.cpp",
           "    } else if (beats && quiet.over()) {\n",
           "    } else if (beats) {\n",
           ["actorlm"], [ctest_run("server:wall_clock")]),
    Mutant("stall-on-wall-clock",
           "a request stalls whenever a caf::after fires with no new step, which the wall clock can cut short",
           "actors/engine.cpp",
           "    if (!quiet.over()) continue;\n",
           "",
           ["actorlm"], [ctest_run("server:wall_clock")]),
    # LoRA adapters on cluster nodes, against stand-in nodes (router_actor_test's
    # [lora] cases, seconds; these ran cluster:lora, ~50 s a mutant in CI): an
    # adapter's KV never moves; a node that joins while a change goes out, or
    # comes back having missed a drop, is caught up; one whose set differs
    # otherwise is refused; a load one node fails is dropped again on the
    # others. (cluster:lora checks the same with real nodes.)
    Mutant("pd-splits-adapter-requests",
           "the head splits a request with a LoRA adapter across a prefill and a decode node",
           "cluster/roles/router_actor.cpp",
           " && req.message->adapter() == 0;\n",
           ";\n",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"], "[lora]")),
    Mutant("node-adapters-unchecked",
           "a node whose adapters differ from the others' joins a head",
           "cluster/roles/router_actor.cpp",
           "    } else if (theirs_list != s.adapter_list) {\n",
           "    } else if (false) {\n",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"], "[lora]")),
    Mutant("join-during-adapter-change",
           "a node that joins while an adapter change goes out joins at once, and misses the change",
           "cluster/roles/router_actor.cpp",
           '  if (s.adapter_change && w.disaggregation_mode != "decode") {\n',
           "  if (false) {\n",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"], "[lora]")),
    # Issue 38: heads sharing nodes follow each other's adapter changes.
    Mutant("adapter-news-ignored",
           "a head ignores a node's word of another head's adapter change (two heads' sets drift apart)",
           "cluster/roles/router_actor.cpp",
           "      [self](adapter_news_atom, const WireMessage& in) { on_adapter_news(self, in); },\n",
           "      [self](adapter_news_atom, const WireMessage& in) { if (false) on_adapter_news(self, in); },\n",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"], "[lora]")),
    Mutant("learned-adapter-not-replayed",
           "a load learned from another head is served but not given to a node that missed it",
           "cluster/roles/router_actor.cpp",
           "      s.loaded_here[c.id] = c;\n      s.dropped_here.erase(c.id);\n      adapters_changed(s);\n      std::fprintf(stderr, \"actorlm head: LoRA adapter %s #%d, loaded",
           "      s.dropped_here.erase(c.id);\n      adapters_changed(s);\n      std::fprintf(stderr, \"actorlm head: LoRA adapter %s #%d, loaded",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"], "[lora]")),
    Mutant("node-news-unsent",
           "a node tells no other head of an adapter change one head made",
           "cluster/roles/node_gateway.cpp",
           "        if (addr != from) self->send(head.router, adapter_news_atom::value, news);\n",
           "        (void)addr, (void)head, (void)news;\n",
           ["actorlm"], [ctest_run("cluster:lora")], ci=False),
    Mutant("adapter-drop-not-replayed",
           "a node that comes back with an adapter dropped through the head since is refused, not caught up",
           "cluster/roles/router_actor.cpp",
           "drop != s.dropped_here.end() && drop->second == a->name) {",
           "drop != s.dropped_here.end() && drop->second != a->name) {",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"], "[lora]")),
    Mutant("tls-error-queue-kept",
           "CAF's TLS calls find an earlier connection's OpenSSL error still queued (as CAF leaves it)",
           "cluster/transport/tls_error_queue.cpp",
           "  ERR_clear_error();\n",
           "",
           ["cluster_transport_remote_setup_test"], catch_runs(["cluster_transport_remote_setup_test"], "[tls]")),
    Mutant("pd-loss-outside-failover-budget",
           "a split request's fresh starts after losing a node are capped at three attempts, not --failover-attempts",
           "cluster/roles/router_actor.cpp",
           "  const bool again = node_lost ? r.moves < s.config.failover_attempts : ++r.refused < max_pd_attempts;\n",
           "  const bool again = ++r.refused < max_pd_attempts;\n",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"], "[pd]")),
    Mutant("adapter-load-kept-on-some-nodes",
           "a load through a head that fails on one node stays loaded on the others (the nodes' sets part)",
           "cluster/roles/router_actor.cpp",
           "    for (size_t i : g->done) {\n",
           "    for (size_t i : std::vector<size_t>{}) {\n",
           ["cluster_roles_router_actor_test"], catch_runs(["cluster_roles_router_actor_test"], "[lora]")),
    # Shared packed weights: a runner that packs its own copy passes every
    # output check (the copies are equal), so only the count of copies tells;
    # one keyed by address alone would hand a shorter view a longer one's tiles.
    Mutant("prepared-weights-unshared",
           "a runner never finds the packed copies of the runners alive over its file, and packs its own",
           "model/host_executor.cpp",
           "    shared = slot.lock();\n",
           "    shared = nullptr;\n",
           ["model_model_runner_test"], catch_runs(["model_model_runner_test"], "Runners over copies*")),
    Mutant("prepared-weights-shape-blind",
           "a prepared copy is found by its bytes' address alone, whatever the view's shape",
           "kernels/prepared_weights.cpp",
           "  Key key{w.data, w.rows, w.cols, w.type, std::type_index(typeid(backend))};",
           "  Key key{w.data, 0, 0, GgmlType::F32, std::type_index(typeid(backend))};",
           ["kernels_prepared_weights_test"], catch_runs(["kernels_prepared_weights_test"])),
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
            if d.is_file() and not rel.startswith("build/") and rel not in wanted:
                d.unlink()
    for rel in sorted(wanted):
        s, d = src / rel, dst / rel
        if d.is_file() and d.read_bytes() == s.read_bytes():
            continue
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)


def check_patterns() -> int:
    """0 when every mutant's line is found exactly once in the checkout.

    The mutation run itself comes last in CI (an hour in); this check runs in
    build/'s CTest run, so a commit that moves a mutant's line fails in
    seconds, and on the machine of whoever moved it."""
    stale = 0
    for m in MUTANTS:
        path = ROOT / m.path
        count = path.read_text().count(m.old) if path.is_file() else -1
        if count != 1:
            stale += 1
            where = "does not exist" if count < 0 else f"holds its line {count} times, not once"
            print(f"mutant {m.name}: {m.path} {where} (the code changed: update the mutant)")
    print(f"{len(MUTANTS) - stale} of {len(MUTANTS)} mutants' lines found once")
    return 1 if stale else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="mutants to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--ci", action="store_true",
                    help="only the mutants CI runs, with no unmutated baseline runs")
    ap.add_argument("--check-patterns", action="store_true",
                    help="only check that every mutant's line occurs exactly once (no build; a CTest test)")
    # Default under the repository root (ignored by /build*/): ccache's
    # base_dir then sees the same relative paths as the ./build build.
    ap.add_argument("--workdir", type=Path, default=ROOT / "build-mutants",
                    help="scratch folder (source copy + build); reused between runs")
    ap.add_argument("-j", type=int, default=2, help="build parallelism")
    ap.add_argument("--test-timeout", type=float, default=1200, help="seconds per test command")
    args = ap.parse_args()

    if args.list:
        for m in MUTANTS:
            print(f"{m.name:24} {'ci ' if m.ci else '   '}{m.path}: {m.what}")
        return 0
    if args.check_patterns:
        return check_patterns()
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        ap.error(f"unknown mutants: {', '.join(sorted(unknown))} (see --list)")
    chosen = [m for m in MUTANTS if (not args.names or m.name in args.names) and (m.ci or not args.ci)]

    src = args.workdir.resolve() / "src"
    build = src / "build"  # <src>/build: the same relative layout as <root>/build
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
    # ...and with paths under the checkout hashed relative to it: then
    # <src>/build shares objects with <root>/build and a fresh clone's
    # builds (scripts/build.sh sets the same).
    os.environ.setdefault("CCACHE_BASEDIR", str(ROOT))

    log(f"copying {ROOT} into {src}")
    copy_tree(ROOT, src)
    if not (build / "build.ninja").is_file():
        # build/'s configuration (scripts/build.sh's), CUDA included where nvcc
        # is: every object a mutant does not touch is then a ccache hit from
        # build/. The CPU-only configuration this had (-DACTORLM_CUDA=OFF)
        # shared no object that includes actorlm/config.hpp with any other CI
        # build, so CI, whose ccache starts empty, compiled most of the tree
        # once more for the mutants. Benchmarks off: no mutant's test needs one
        # (the flag changes no other target's compile line).
        rc = run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
                  "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DACTORLM_BUILD_BENCH=OFF"],
                 src, logs / "configure.log")
        if rc != 0:
            log(f"configure failed, see {logs / 'configure.log'}")
            return 1

    def build_targets(m: Mutant, cmd: list[str], logfile: Path) -> bool:
        """Builds what cmd needs: a Catch2 run its own binary, a CTest run all of m's targets."""
        targets = m.targets if cmd[0] == "ctest" else [Path(cmd[0]).name]
        return run(["cmake", "--build", str(build), "--parallel", str(args.j), "--target", *targets],
                   src, logfile) == 0

    def run_test(cmd: list[str], logfile: Path) -> bool:
        return run([c.replace("{build}", str(build)) for c in cmd], src, logfile,
                   timeout=args.test_timeout) == 0

    # A test command's unmutated outcome, run only when it fails under some
    # mutant and kept for the others (the scheduler test takes minutes).
    baseline: dict[tuple, tuple[str, Path]] = {}  # command -> (outcome, log)

    def describe(cmd: list[str]) -> str:
        return " ".join(cmd[-3:] if cmd[0] == "ctest" else [Path(cmd[0]).name])

    def passes_unmutated(m: Mutant, cmd: list[str], path: Path, original: str) -> bool:
        """Restores the file and tells whether cmd passes there (cached)."""
        if args.ci:
            return True  # see the docstring: CI ran it green in an earlier stage
        if tuple(cmd) not in baseline:
            log(f"{m.name}: {describe(cmd)} failed; running it unmutated")
            logfile = logs / f"{m.name}.baseline.log"
            path.write_text(original)
            built = build_targets(m, cmd, logfile)
            ok = built and run_test(cmd, logfile)
            baseline[tuple(cmd)] = ("pass" if ok else "fail" if built else "build-error", logfile)
        return baseline[tuple(cmd)][0] == "pass"

    def judge(m: Mutant, path: Path, original: str) -> tuple[str, str]:
        """(status, detail): runs m's commands in order until one fails that passes unmutated."""
        logfile = logs / f"{m.name}.mutant.log"
        mutated = original.replace(m.old, m.new)
        path.write_text(mutated)
        dropped = []
        for cmd in m.runs:
            if not build_targets(m, cmd, logfile):
                return "error", f"mutant did not compile (log: {logfile})"
            if run_test(cmd, logfile):
                continue
            if passes_unmutated(m, cmd, path, original):
                return "killed", f"by {describe(cmd)} (log: {logfile})"
            dropped.append(f"{describe(cmd)} ({baseline[tuple(cmd)][0]} unmutated, log: {baseline[tuple(cmd)][1]})")
            path.write_text(mutated)  # back to the mutant for the next command
        note = f"; left out, failing unmutated: {', '.join(dropped)}" if dropped else ""
        if dropped and len(dropped) == len(m.runs):
            return "error", f"every test command fails unmutated{note}"
        return "survived", f"all its tests passed (log: {logfile}){note}"

    # Every pattern first: a mutant whose line changed fails the run at once,
    # before minutes of building.
    results: list[tuple[Mutant, str, str]] = []
    runnable = []
    for m in chosen:
        path = src / m.path
        count = path.read_text().count(m.old) if path.is_file() else -1
        if count != 1:
            why = f"{m.path} does not exist" if count < 0 else f"pattern found {count} times in {m.path}, expected once"
            results.append((m, "error", why + " (the code changed: update the mutant)"))
            log(f"{m.name}: ERROR, {why}")
        else:
            runnable.append(m)
    for m in runnable:
        path = src / m.path
        original = path.read_text()
        log(f"{m.name}: applying to {m.path}")
        try:
            status, detail = judge(m, path, original)
        finally:
            path.write_text(original)
        results.append((m, status, detail))
        log(f"{m.name}: {status.upper()} {detail}")

    print("\nmutant                   result    detail")
    for m, status, detail in results:
        print(f"{m.name:24} {status:9} {m.what}\n{'':34} {detail}")
    counts = {s: sum(1 for _, r, _ in results if r == s) for s in ("killed", "survived", "error")}
    print("\n" + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["survived"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
