#include "scheduler/stats_board.hpp"

namespace actorlm {

SchedulerFigures figures_of(const Scheduler& s, const SchedulerConfig& config, const std::string& worker_lost,
                            int64_t worker_restarts) {
  SchedulerFigures f;
  f.running = static_cast<int32_t>(s.running());
  f.waiting = static_cast<int32_t>(s.waiting());
  f.stats = s.stats();
  if (config.tiers) {
    f.host = config.tiers->host_stats().value_or(KvHostStats{});
    f.storage = config.tiers->disk_stats().value_or(KvDiskStats{});
  }
  f.worker_lost = worker_lost;
  f.worker_restarts = worker_restarts;
  f.seconds_per_prefill_token = s.step_budget().seconds_per_prefill_token().value_or(0);
  f.seconds_per_decode_row = s.step_budget().seconds_per_decode_row().value_or(0);
  return f;
}

}  // namespace actorlm
