#include "server/metrics_text.hpp"

namespace actorlm {

std::string metrics_text(const EngineStatsSnapshot& st) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(value) + "\n";
  };
  metric("actorlm_prompt_tokens_total", "counter", "Prompt tokens admitted.",
         double(st.scheduler.prompt_tokens));
  metric("actorlm_cached_prompt_tokens_total", "counter",
         "Prompt tokens served from the radix cache.", double(st.scheduler.cached_tokens));
  metric("actorlm_generation_tokens_total", "counter", "Tokens generated.",
         double(st.scheduler.generated_tokens));
  metric("actorlm_running_requests", "gauge", "Requests being decoded or prefilled.", st.running);
  metric("actorlm_waiting_requests", "gauge", "Requests queued.", st.waiting);
  metric("actorlm_cache_hit_rate", "gauge",
         "Fraction of prompt tokens served from the radix cache.", st.scheduler.cache_hit_rate());
  metric("actorlm_kv_pool_capacity_tokens", "gauge", "KV pool rows.", double(st.kv.capacity));
  metric("actorlm_kv_pool_free_tokens", "gauge", "KV pool rows free.", double(st.kv.free));
  metric("actorlm_kv_pool_cached_tokens", "gauge", "KV rows held by the radix cache, evictable.",
         double(st.kv.evictable));
  metric("actorlm_kv_pool_locked_tokens", "gauge",
         "KV rows held by running requests through the cache.", double(st.kv.protected_));
  metric("actorlm_request_slots_free", "gauge", "Request slots (req_to_token rows) free.",
         st.kv.free_slots);
  metric("actorlm_prefill_steps_total", "counter", "Steps that prefilled (decode rows may ride along).",
         double(st.scheduler.prefill_steps));
  metric("actorlm_decode_steps_total", "counter", "Steps that only decoded.", double(st.scheduler.decode_steps));
  metric("actorlm_failed_steps_total", "counter",
         "Steps the worker failed; their requests were computed again, none failed for it.",
         double(st.scheduler.failed_steps));
  metric("actorlm_poisoned_requests_total", "counter",
         "Requests failed alone after the engine failed on them twice (the second time alone).",
         double(st.scheduler.poisoned));
  metric("actorlm_worker_resets_total", "counter",
         "Times the worker node came back without its KV (--remote-worker); running requests were computed again.",
         double(st.scheduler.worker_resets));
  metric("actorlm_reset_requests_total", "counter",
         "Running requests computed again from their tokens after the worker came back without its KV.",
         double(st.scheduler.reset_requests));
  metric("actorlm_migrated_in_requests_total", "counter",
         "Running requests that came from another node with their KV (live migration).",
         double(st.scheduler.migrated_in));
  metric("actorlm_migrated_out_requests_total", "counter",
         "Running requests that went to another node with their KV.", double(st.scheduler.migrated_out));
  metric("actorlm_preemptions_total", "counter",
         "Running requests sent back to wait for a more urgent one (--enable-priority-scheduling).",
         double(st.scheduler.preemptions));
  metric("actorlm_share_preemptions_total", "counter",
         "Running requests sent back so a tenant below its share of the batch got a place (--tenant-preemption).",
         double(st.scheduler.share_preemptions));
  metric("actorlm_kv_quota_retractions_total", "counter",
         "Running requests sent back to wait because their tenant's requests claimed more than its max_kv_tokens.",
         double(st.scheduler.kv_quota_retractions));
  metric("actorlm_kv_quota_finishes_total", "counter",
         "Requests ended (finish reason length) because they alone filled their tenant's max_kv_tokens.",
         double(st.scheduler.kv_quota_finishes));
  metric("actorlm_queue_rejected_requests_total", "counter",
         "Requests refused with 429 because the queue was full (--max-queued-requests).",
         double(st.scheduler.queue_rejections));
  metric("actorlm_queue_timeouts_total", "counter",
         "Requests failed with 408 after waiting past --queue-timeout.", double(st.scheduler.queue_timeouts));
  if (st.scheduler.spec_verifies() > 0) {
    metric("actorlm_spec_verifies_total", "counter",
           "Steps of a request that carried drafted tokens (speculative decoding).", double(st.scheduler.spec_verifies()));
    metric("actorlm_spec_draft_tokens_total", "counter", "Tokens drafted.", double(st.scheduler.spec_drafted));
    metric("actorlm_spec_accepted_tokens_total", "counter", "Drafted tokens the target model kept.",
           double(st.scheduler.spec_accepted));
    metric("actorlm_spec_table_draft_tokens_total", "counter",
           "Tokens drafted from other requests' text (--speculative-ngram-capacity).",
           double(st.scheduler.spec_table_drafted));
    // Drafts kept per verify, as a Prometheus histogram (cumulative buckets).
    out += "# HELP actorlm_spec_accept_length Drafted tokens kept per verify step.\n"
           "# TYPE actorlm_spec_accept_length histogram\n";
    int64_t below = 0, sum = 0;
    const auto& h = st.scheduler.spec_accept_lengths;
    for (size_t n = 0; n < h.size(); ++n) {
      below += h[n];
      sum += h[n] * static_cast<int64_t>(n);
      out += "actorlm_spec_accept_length_bucket{le=\"" + std::to_string(n) + "\"} " + std::to_string(below) + "\n";
    }
    out += "actorlm_spec_accept_length_bucket{le=\"+Inf\"} " + std::to_string(below) + "\n" +
           "actorlm_spec_accept_length_sum " + std::to_string(sum) + "\n" +
           "actorlm_spec_accept_length_count " + std::to_string(below) + "\n";
  }
  metric("actorlm_worker_up", "gauge", "1 while the worker serves; 0 once it is lost for good (every request fails).",
         st.worker_lost.empty() ? 1 : 0);
  metric("actorlm_worker_restarts_total", "counter",
         "Worker actors that ended and were started again over the same weights and KV pool.",
         double(st.worker_restarts));
  metric("actorlm_prefill_token_seconds", "gauge",
         "Measured seconds per prefill token, which sizes steps under --max-step-ms (0: not measured).",
         st.seconds_per_prefill_token);
  metric("actorlm_decode_row_seconds", "gauge",
         "Measured seconds per decoded row of a step (0: not measured).", st.seconds_per_decode_row);
  if (st.host.capacity_bytes > 0) {
    metric("actorlm_hicache_host_hit_tokens_total", "counter",
           "Prompt tokens loaded from the host tier of the KV cache instead of computed.",
           double(st.scheduler.host_hit_tokens));
    metric("actorlm_hicache_host_blocks", "gauge", "KV blocks in the host tier.", double(st.host.blocks));
    metric("actorlm_hicache_host_bytes", "gauge", "Bytes in the host tier.", double(st.host.bytes));
    metric("actorlm_hicache_host_capacity_bytes", "gauge", "The host tier's capacity.",
           double(st.host.capacity_bytes));
    metric("actorlm_hicache_host_stored_blocks_total", "counter", "KV blocks copied to the host tier.",
           double(st.host.stored));
    metric("actorlm_hicache_host_loaded_blocks_total", "counter", "KV blocks copied back from the host tier.",
           double(st.host.loaded));
    metric("actorlm_hicache_host_evicted_blocks_total", "counter", "KV blocks the host tier let go for room.",
           double(st.host.evicted));
  }
  if (st.storage.capacity_bytes > 0) {
    metric("actorlm_hicache_storage_hit_tokens_total", "counter",
           "Prompt tokens loaded from the disk tier of the KV cache instead of computed.",
           double(st.scheduler.disk_hit_tokens));
    metric("actorlm_hicache_storage_blocks", "gauge", "KV blocks in the disk tier.", double(st.storage.blocks));
    metric("actorlm_hicache_storage_bytes", "gauge", "Bytes in the disk tier.", double(st.storage.bytes));
    metric("actorlm_hicache_storage_capacity_bytes", "gauge", "The disk tier's capacity.",
           double(st.storage.capacity_bytes));
    metric("actorlm_hicache_storage_stored_blocks_total", "counter", "KV blocks written to the disk tier.",
           double(st.storage.stored));
    metric("actorlm_hicache_storage_evicted_blocks_total", "counter", "KV blocks deleted for room.",
           double(st.storage.evicted));
    metric("actorlm_hicache_storage_rejected_blocks_total", "counter",
           "Disk-tier files refused as damaged (and deleted).", double(st.storage.rejected));
    metric("actorlm_hicache_storage_foreign_blocks", "gauge",
           "Disk-tier files of another model or KV layout, left alone.", double(st.storage.foreign));
  }
  if (!st.nodes.empty()) {
    // A cluster head: one series per worker node, labelled by its address.
    auto per_node = [&](const char* name, const char* type, const char* help, auto value) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
      for (const auto& n : st.nodes)
        out +=
            std::string(name) + "{node=\"" + n.address + "\"} " + std::to_string(value(n)) + "\n";
    };
    per_node("actorlm_node_up", "gauge", "Whether the worker node is joined.",
             [](const auto& n) { return n.alive ? 1.0 : 0.0; });
    per_node("actorlm_node_routed_requests_total", "counter", "Requests routed to the node.",
             [](const auto& n) { return double(n.routed); });
    per_node("actorlm_node_in_flight_requests", "gauge",
             "Requests routed to the node and not finished.",
             [](const auto& n) { return double(n.in_flight); });
    per_node("actorlm_node_cache_hit_rate", "gauge",
             "Fraction of the node's prompt tokens served from its radix cache.",
             [](const auto& n) { return n.cache_hit_rate; });
    per_node("actorlm_node_kv_pool_free_tokens", "gauge", "The node's free KV rows.",
             [](const auto& n) { return double(n.pool_free); });
    per_node("actorlm_node_draining", "gauge", "Whether the node is drained (its requests move elsewhere).",
             [](const auto& n) { return n.draining ? 1.0 : 0.0; });
    per_node("actorlm_node_migrated_in_requests_total", "counter",
             "Running requests that came to the node with their KV.",
             [](const auto& n) { return double(n.migrated_in); });
    per_node("actorlm_node_migrated_out_requests_total", "counter",
             "Running requests that left the node with their KV.",
             [](const auto& n) { return double(n.migrated_out); });
  }
  return out;
}

nlohmann::json nodes_json(const EngineStatsSnapshot& st) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : st.nodes) {
    nodes.push_back({{"address", n.address},
                     {"alive", n.alive},
                     {"routed", n.routed},
                     {"in_flight", n.in_flight},
                     {"running", n.running},
                     {"waiting", n.waiting},
                     {"cache_hit_rate", n.cache_hit_rate},
                     {"prompt_tokens", n.prompt_tokens},
                     {"cached_tokens", n.cached_tokens},
                     {"kv_capacity_tokens", n.pool_capacity},
                     {"kv_free_tokens", n.pool_free},
                     {"kv_locked_tokens", n.protected_tokens},
                     {"kv_evictable_tokens", n.evictable_tokens},
                     {"invariant_error", n.invariant_error},
                     {"disaggregation_mode", n.disaggregation_mode},
                     {"draining", n.draining},
                     {"migrated_in", n.migrated_in},
                     {"migrated_out", n.migrated_out},
                     {"error", n.error}});
  }
  return {{"nodes", nodes}};
}

}  // namespace actorlm
