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

std::optional<size_t> QueuePolicy::share_victim(const Request& w, std::span<const Request* const> running,
                                                const std::vector<bool>& movable) const {
  if (!share_preemption || !fair_share() || running.empty()) return std::nullopt;
  // Places held and weight, by tenant, of the tenants with demand.
  std::vector<int32_t> tenants;
  std::vector<int64_t> held;
  auto slot = [&](int32_t t) {
    const auto it = std::find(tenants.begin(), tenants.end(), t);
    if (it != tenants.end()) return static_cast<size_t>(it - tenants.begin());
    tenants.push_back(t);
    held.push_back(0);
    return tenants.size() - 1;
  };
  for (const Request* r : running) ++held[slot(r->tenant)];
  const size_t mine = slot(w.tenant);
  double total = 0;
  for (int32_t t : tenants) total += std::max(weight(t), 1e-9);
  const auto places = static_cast<double>(running.size());
  auto share = [&](size_t i) { return places * std::max(weight(tenants[i]), 1e-9) / total; };
  if (static_cast<double>(held[mine] + 1) > share(mine)) return std::nullopt;
  // The tenant furthest above its share, by places, that stays at or above
  // it after giving one up.
  std::optional<size_t> over;
  for (size_t i = 0; i < tenants.size(); ++i) {
    const double excess = static_cast<double>(held[i]) - share(i);
    if (i == mine || static_cast<double>(held[i] - 1) < share(i)) continue;
    if (!over || excess > static_cast<double>(held[*over]) - share(*over)) over = i;
  }
  if (!over) return std::nullopt;
  std::optional<size_t> victim;
  for (size_t i = 0; i < running.size(); ++i) {
    const Request& r = *running[i];
    if (r.tenant != tenants[*over] || !movable[i] || rank(r) > rank(w)) continue;
    if (!victim || r.arrival > running[*victim]->arrival) victim = i;
  }
  return victim;
}

bool QueuePolicy::goes_back_before(const Request& a, const Request& b) const {
  if (rank(a) != rank(b)) return rank(a) < rank(b);
  return a.arrival > b.arrival;
}

bool QueuePolicy::may_preempt(const Request& w, const Request& r) const {
  return priorities && rank(w) - rank(r) >= preemption_threshold;
}

}  // namespace actorlm
