#include "scheduler/stats_board.hpp"

namespace actorlm {

SchedulerFigures figures_of(const Scheduler& s, const SchedulerConfig& config, const std::string& worker_lost) {
  SchedulerFigures f;
  f.running = static_cast<int32_t>(s.running());
  f.waiting = static_cast<int32_t>(s.waiting());
  f.stats = s.stats();
  if (KvHostStore* h = config.tiers ? config.tiers->host() : nullptr) f.host = h->stats();
  if (KvDiskStore* d = config.tiers ? config.tiers->disk() : nullptr) f.storage = d->stats();
  f.worker_lost = worker_lost;
  f.seconds_per_prefill_token = s.step_budget().seconds_per_prefill_token().value_or(0);
  f.seconds_per_decode_row = s.step_budget().seconds_per_decode_row().value_or(0);
  return f;
}

}  // namespace actorlm
