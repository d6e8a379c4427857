#pragma once
// The scheduler's figures, published after every step for readers on other
// threads (the HTTP server's /metrics and /health, Engine::stats). Readers
// never wait for a step: a forward pass may take seconds, a probe must
// answer at once (issue 32: /metrics and /health went 30 s without an
// answer while one prompt prefilled). The KV pool's figures are not here:
// its managers answer between the scheduler's messages, so a reader asks
// them directly.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kvstore/kv_disk_store.hpp"
#include "kvstore/kv_host_store.hpp"
#include "scheduler/scheduler.hpp"

namespace actorlm {

struct SchedulerFigures {
  int32_t running = 0, waiting = 0;
  SchedulerStats stats;
  KvHostStats host;     // the host tier's (all zero without one)
  KvDiskStats storage;  // the disk tier's (all zero without one)
  // Why the worker is gone for good (every request now fails); empty while
  // it serves.
  std::string worker_lost;
  int64_t worker_restarts = 0;  // worker actors that ended and were started again
  // The step time budget's estimates (scheduler/step_budget.hpp); 0 until
  // measured.
  double seconds_per_prefill_token = 0, seconds_per_decode_row = 0;
  int64_t publications = 0;  // 0: nothing published yet
};

// One writer (the scheduler's thread), any number of readers. The tiers'
// figures are read live when the board knows the tiers: their stores finish
// on the tiers' own thread, after the step that queued them, and an idle
// scheduler publishes nothing more.
class StatsBoard {
 public:
  explicit StatsBoard(std::shared_ptr<const KvTiers> tiers = nullptr) : tiers_(std::move(tiers)) {}

  void publish(SchedulerFigures figures) {
    std::lock_guard<std::mutex> lock(mu_);
    figures.publications = figures_.publications + 1;
    figures_ = std::move(figures);
  }
  SchedulerFigures read() const {
    SchedulerFigures f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      f = figures_;
    }
    if (tiers_) {
      f.host = tiers_->host_stats().value_or(KvHostStats{});
      f.storage = tiers_->disk_stats().value_or(KvDiskStats{});
    }
    return f;
  }

 private:
  mutable std::mutex mu_;
  SchedulerFigures figures_;
  std::shared_ptr<const KvTiers> tiers_;
};

// The figures of `s` now (tier statistics from its config's tiers).
SchedulerFigures figures_of(const Scheduler& s, const SchedulerConfig& config, const std::string& worker_lost,
                            int64_t worker_restarts = 0);

}  // namespace actorlm
