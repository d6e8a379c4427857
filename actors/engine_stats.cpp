#include "actors/engine_stats.hpp"

#include <algorithm>
#include <cstdio>

#include "messages/stats_generated.h"

namespace actorlm {

fb::EngineStatsT to_message(const EngineStatsSnapshot& s) {
  fb::EngineStatsT m;
  m.running = s.running;
  m.waiting = s.waiting;
  const SchedulerStats& x = s.scheduler;
  m.finished_total = x.finished;
  m.prompt_tokens_total = x.prompt_tokens;
  m.cached_tokens_total = x.cached_tokens;
  m.generated_tokens_total = x.generated_tokens;
  m.prefill_steps_total = x.prefill_steps;
  m.decode_steps_total = x.decode_steps;
  m.cache_hit_rate = x.cache_hit_rate();
  m.storage_hit_tokens_total = x.disk_hit_tokens;
  m.host_hit_tokens_total = x.host_hit_tokens;
  m.pool_capacity_tokens = s.kv.capacity;
  m.pool_free_tokens = s.kv.free;
  m.evictable_tokens = s.kv.evictable;
  m.protected_tokens = s.kv.protected_;
  m.free_req_slots = s.kv.free_slots;
  m.invariant_error = s.invariant_error;
  m.host_blocks = s.host.blocks;
  m.host_bytes = s.host.bytes;
  m.host_capacity_bytes = s.host.capacity_bytes;
  m.host_stored_blocks_total = s.host.stored;
  m.host_loaded_blocks_total = s.host.loaded;
  m.host_evicted_blocks_total = s.host.evicted;
  m.storage_blocks = s.storage.blocks;
  m.storage_bytes = s.storage.bytes;
  m.storage_capacity_bytes = s.storage.capacity_bytes;
  m.storage_stored_blocks_total = s.storage.stored;
  m.storage_evicted_blocks_total = s.storage.evicted;
  m.storage_rejected_blocks_total = s.storage.rejected;
  m.storage_foreign_blocks = s.storage.foreign;
  m.migrated_in_total = x.migrated_in;
  m.migrated_out_total = x.migrated_out;
  m.failed_steps_total = x.failed_steps;
  m.poisoned_requests_total = x.poisoned;
  m.worker_resets_total = x.worker_resets;
  m.reset_requests_total = x.reset_requests;
  m.spec_drafted_tokens_total = x.spec_drafted;
  m.spec_table_drafted_tokens_total = x.spec_table_drafted;
  m.preemptions_total = x.preemptions;
  m.share_preemptions_total = x.share_preemptions;
  m.kv_quota_retractions_total = x.kv_quota_retractions;
  m.kv_quota_finishes_total = x.kv_quota_finishes;
  m.queue_rejections_total = x.queue_rejections;
  m.queue_timeouts_total = x.queue_timeouts;
  m.spec_accepted_tokens_total = x.spec_accepted;
  m.spec_accept_lengths.assign(x.spec_accept_lengths.begin(), x.spec_accept_lengths.end());
  for (const NodeStatsSnapshot& n : s.nodes) {
    auto r = std::make_unique<fb::NodeStatsT>();
    r->address = n.address;
    r->alive = n.alive;
    r->routed_total = n.routed;
    r->in_flight = n.in_flight;
    r->running = n.running;
    r->waiting = n.waiting;
    r->cache_hit_rate = n.cache_hit_rate;
    r->prompt_tokens_total = n.prompt_tokens;
    r->cached_tokens_total = n.cached_tokens;
    r->pool_capacity_tokens = n.pool_capacity;
    r->pool_free_tokens = n.pool_free;
    r->protected_tokens = n.protected_tokens;
    r->error = n.error;
    r->disaggregation_mode = n.disaggregation_mode;
    r->evictable_tokens = n.evictable_tokens;
    r->invariant_error = n.invariant_error;
    r->draining = n.draining;
    r->migrated_in_total = n.migrated_in;
    r->migrated_out_total = n.migrated_out;
    m.nodes.push_back(std::move(r));
  }
  return m;
}

EngineStatsSnapshot from_message(const fb::EngineStatsT& m) {
  EngineStatsSnapshot s;
  s.running = m.running;
  s.waiting = m.waiting;
  SchedulerStats& x = s.scheduler;
  x.finished = m.finished_total;
  x.prompt_tokens = m.prompt_tokens_total;
  x.cached_tokens = m.cached_tokens_total;
  x.generated_tokens = m.generated_tokens_total;
  x.prefill_steps = m.prefill_steps_total;
  x.decode_steps = m.decode_steps_total;
  x.disk_hit_tokens = m.storage_hit_tokens_total;
  x.host_hit_tokens = m.host_hit_tokens_total;
  s.kv = {m.pool_capacity_tokens, m.pool_free_tokens, m.evictable_tokens, m.protected_tokens, m.free_req_slots};
  s.invariant_error = m.invariant_error;
  s.host = {m.host_blocks, m.host_bytes, m.host_capacity_bytes, m.host_stored_blocks_total,
            m.host_loaded_blocks_total, m.host_evicted_blocks_total};
  s.storage.blocks = m.storage_blocks;
  s.storage.bytes = m.storage_bytes;
  s.storage.capacity_bytes = m.storage_capacity_bytes;
  s.storage.stored = m.storage_stored_blocks_total;
  s.storage.evicted = m.storage_evicted_blocks_total;
  s.storage.rejected = m.storage_rejected_blocks_total;
  s.storage.foreign = m.storage_foreign_blocks;
  x.migrated_in = m.migrated_in_total;
  x.migrated_out = m.migrated_out_total;
  x.failed_steps = m.failed_steps_total;
  x.poisoned = m.poisoned_requests_total;
  x.worker_resets = m.worker_resets_total;
  x.reset_requests = m.reset_requests_total;
  x.spec_drafted = m.spec_drafted_tokens_total;
  x.spec_table_drafted = m.spec_table_drafted_tokens_total;
  x.preemptions = m.preemptions_total;
  x.share_preemptions = m.share_preemptions_total;
  x.kv_quota_retractions = m.kv_quota_retractions_total;
  x.kv_quota_finishes = m.kv_quota_finishes_total;
  x.queue_rejections = m.queue_rejections_total;
  x.queue_timeouts = m.queue_timeouts_total;
  x.spec_accepted = m.spec_accepted_tokens_total;
  // A peer's longer histogram (a larger kMaxDraftTokens) folds into the last bucket.
  for (size_t i = 0; i < m.spec_accept_lengths.size(); ++i) {
    x.spec_accept_lengths[std::min(i, x.spec_accept_lengths.size() - 1)] += m.spec_accept_lengths[i];
  }
  for (const auto& r : m.nodes) {
    if (!r) continue;
    s.nodes.push_back({r->address, r->alive, r->routed_total, r->in_flight, r->running, r->waiting,
                       r->cache_hit_rate, r->prompt_tokens_total, r->cached_tokens_total, r->pool_capacity_tokens,
                       r->pool_free_tokens, r->protected_tokens, r->error, r->disaggregation_mode,
                       r->evictable_tokens, r->invariant_error, r->draining, r->migrated_in_total,
                       r->migrated_out_total});
  }
  return s;
}

void add_node(EngineStatsSnapshot& t, NodeStatsSnapshot& row, const EngineStatsSnapshot& n) {
  t.running += n.running;
  t.waiting += n.waiting;
  SchedulerStats& a = t.scheduler;
  const SchedulerStats& b = n.scheduler;
  for (auto field : {&SchedulerStats::steps, &SchedulerStats::prefill_steps, &SchedulerStats::decode_steps,
                     &SchedulerStats::prompt_tokens, &SchedulerStats::cached_tokens, &SchedulerStats::generated_tokens,
                     &SchedulerStats::retractions, &SchedulerStats::finished, &SchedulerStats::aborted,
                     &SchedulerStats::host_hit_tokens, &SchedulerStats::disk_hit_tokens, &SchedulerStats::migrated_in,
                     &SchedulerStats::migrated_out, &SchedulerStats::failed_steps, &SchedulerStats::poisoned,
                     &SchedulerStats::worker_resets, &SchedulerStats::reset_requests,
                     &SchedulerStats::spec_drafted, &SchedulerStats::spec_accepted,
                     &SchedulerStats::spec_table_drafted, &SchedulerStats::preemptions, &SchedulerStats::share_preemptions,
                     &SchedulerStats::queue_rejections, &SchedulerStats::queue_timeouts,
                     &SchedulerStats::kv_quota_retractions, &SchedulerStats::kv_quota_finishes}) {
    a.*field += b.*field;
  }
  for (size_t i = 0; i < a.spec_accept_lengths.size(); ++i) a.spec_accept_lengths[i] += b.spec_accept_lengths[i];
  for (auto field : {&KvUsage::capacity, &KvUsage::free, &KvUsage::evictable, &KvUsage::protected_}) {
    t.kv.*field += n.kv.*field;
  }
  t.kv.free_slots += n.kv.free_slots;
  for (auto field : {&KvHostStats::blocks, &KvHostStats::bytes, &KvHostStats::capacity_bytes, &KvHostStats::stored,
                     &KvHostStats::loaded, &KvHostStats::evicted}) {
    t.host.*field += n.host.*field;
  }
  for (auto field : {&KvDiskStats::blocks, &KvDiskStats::bytes, &KvDiskStats::capacity_bytes, &KvDiskStats::stored,
                     &KvDiskStats::loaded, &KvDiskStats::evicted, &KvDiskStats::rejected, &KvDiskStats::foreign,
                     &KvDiskStats::write_errors}) {
    t.storage.*field += n.storage.*field;
  }
  if (t.invariant_error.empty()) t.invariant_error = n.invariant_error;
  row.running = n.running;
  row.waiting = n.waiting;
  row.cache_hit_rate = n.scheduler.cache_hit_rate();
  row.prompt_tokens = n.scheduler.prompt_tokens;
  row.cached_tokens = n.scheduler.cached_tokens;
  row.pool_capacity = n.kv.capacity;
  row.pool_free = n.kv.free;
  row.protected_tokens = n.kv.protected_;
  row.evictable_tokens = n.kv.evictable;
  row.invariant_error = n.invariant_error;
  row.migrated_in = n.scheduler.migrated_in;
  row.migrated_out = n.scheduler.migrated_out;
}

std::string stats_text(const EngineStatsSnapshot& s) {
  char line[512];
  std::snprintf(line, sizeof line,
                "running %d, waiting %d; prompt tokens %lld (%.1f%% from cache), generated %lld; "
                "KV pool %lld/%lld rows free, %lld cached\n",
                s.running, s.waiting, static_cast<long long>(s.scheduler.prompt_tokens),
                100.0 * s.scheduler.cache_hit_rate(), static_cast<long long>(s.scheduler.generated_tokens),
                static_cast<long long>(s.kv.free), static_cast<long long>(s.kv.capacity),
                static_cast<long long>(s.kv.evictable));
  std::string out = line;
  for (const auto& n : s.nodes) {
    if (n.alive) {
      std::snprintf(line, sizeof line,
                    "  node %s: %lld routed, %d running, %.1f%% prompt tokens from cache, %lld/%lld KV rows free\n",
                    n.address.c_str(), static_cast<long long>(n.routed), n.running, 100.0 * n.cache_hit_rate,
                    static_cast<long long>(n.pool_free), static_cast<long long>(n.pool_capacity));
    } else {
      std::snprintf(line, sizeof line, "  node %s: down (%s)\n", n.address.c_str(), n.error.c_str());
    }
    out += line;
  }
  return out;
}

}  // namespace actorlm
