#pragma once
// An engine's figures as one type, with one converter to each form they take:
// the message a scheduler answers stats_atom with (to_message, from_message;
// also what a node sends its head), a cluster head's sum over its nodes
// (add_node), the REPL's /stats (stats_text). Prometheus and /nodes JSON are
// server/metrics_text's. A field added here is added to each of them once.

#include <cstdint>
#include <string>
#include <vector>

#include "kvstore/kv_disk_store.hpp"
#include "kvstore/kv_host_store.hpp"
#include "scheduler/kv_service.hpp"
#include "scheduler/scheduler.hpp"

namespace actorlm {

namespace fb {
struct EngineStatsT;
}

// One worker node of a cluster head.
struct NodeStatsSnapshot {
  std::string address;
  bool alive = false;
  int64_t routed = 0;        // requests the head sent it
  int32_t in_flight = 0;
  int32_t running = 0, waiting = 0;
  double cache_hit_rate = 0;  // its radix cache's
  int64_t prompt_tokens = 0, cached_tokens = 0;
  int64_t pool_capacity = 0, pool_free = 0, protected_tokens = 0;
  std::string error;          // why it is down
  std::string disaggregation_mode;  // "", "prefill" or "decode"
  int64_t evictable_tokens = 0;
  std::string invariant_error;      // its pool's self-check; empty when it holds
  bool draining = false;            // drained: its requests move elsewhere, nothing new comes
  int64_t migrated_in = 0, migrated_out = 0;
};

struct EngineStatsSnapshot {
  int32_t running = 0, waiting = 0;
  SchedulerStats scheduler;
  KvUsage kv;
  std::string invariant_error;  // filled by self_check when idle
  std::vector<NodeStatsSnapshot> nodes;  // a cluster head's nodes (summed above)
  KvHostStats host;                      // the host tier's (all zero without one)
  KvDiskStats storage;                   // the disk tier's (all zero without one)
  // Why the worker is gone for good; empty while it serves (and for engines
  // whose scheduler is not in this process).
  std::string worker_lost;
  int64_t worker_restarts = 0;  // worker actors that ended and were started again (actors/actor_worker.hpp)
  // The step time budget's estimates (--max-step-ms); 0 until measured.
  double seconds_per_prefill_token = 0, seconds_per_decode_row = 0;
};

// The message form (messages/stats.fbs). It carries what a process other
// than the scheduler's needs: not worker_lost nor the step estimates, which
// are read from the scheduler's own StatsBoard.
fb::EngineStatsT to_message(const EngineStatsSnapshot& s);
EngineStatsSnapshot from_message(const fb::EngineStatsT& m);

// A cluster head's total: one node's figures added to `total`, and the row
// the head shows for that node filled from them (its address, liveness and
// routing figures are the head's own and left as they are).
void add_node(EngineStatsSnapshot& total, NodeStatsSnapshot& row, const EngineStatsSnapshot& node);

// The REPL's /stats: a line for the engine, one per node.
std::string stats_text(const EngineStatsSnapshot& s);

}  // namespace actorlm
