#include "scheduler/queue_policy.hpp"

#include <algorithm>

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

void QueuePolicy::share(std::span<const Request* const> waiting, std::span<const int64_t> running,
                        std::vector<size_t>& order) const {
  if (!fair_share() || order.size() < 2) return;
  auto slot_of = [&](int32_t t) {
    return t >= 0 && static_cast<size_t>(t) < tenant_weights.size() ? static_cast<size_t>(t) : tenant_weights.size();
  };
  std::vector<int64_t> in_line(tenant_weights.size() + 1, 0);
  std::vector<double> at(waiting.size(), 0.0);
  for (size_t i : order) {
    const int32_t t = waiting[i]->tenant;
    const size_t slot = slot_of(t);
    const int64_t held = slot < running.size() ? running[slot] : 0;
    at[i] = static_cast<double>(held + ++in_line[slot]) / std::max(weight(t), 1e-9);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int64_t ra = rank(*waiting[a]), rb = rank(*waiting[b]);
    if (ra != rb) return ra > rb;
    return at[a] < at[b];
  });
}

bool QueuePolicy::goes_back_before(const Request& a, const Request& b) const {
  if (rank(a) != rank(b)) return rank(a) < rank(b);
  return a.arrival > b.arrival;
}

bool QueuePolicy::may_preempt(const Request& w, const Request& r) const {
  return priorities && rank(w) - rank(r) >= preemption_threshold;
}

}  // namespace actorlm
