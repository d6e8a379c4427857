#include "scheduler/queue_policy.hpp"

namespace actorlm {

int64_t QueuePolicy::rank(const Request& r) const {
  if (!priorities) return 0;
  return low_values_first ? -int64_t{r.priority} : int64_t{r.priority};
}

bool QueuePolicy::before(const Request& a, int32_t cached_a, const Request& b, int32_t cached_b, bool lpm) const {
  if (rank(a) != rank(b)) return rank(a) > rank(b);
  const bool sa = starved(a), sb = starved(b);
  if (sa != sb) return sa;
  // Two starved requests go by arrival: the older has waited longer.
  if (lpm && !sa && cached_a != cached_b) return cached_a > cached_b;
  return a.arrival < b.arrival;
}

bool QueuePolicy::goes_back_before(const Request& a, const Request& b) const {
  if (rank(a) != rank(b)) return rank(a) < rank(b);
  return a.arrival > b.arrival;
}

bool QueuePolicy::may_preempt(const Request& w, const Request& r) const {
  return priorities && rank(w) - rank(r) >= preemption_threshold;
}

}  // namespace actorlm
