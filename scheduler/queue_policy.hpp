#pragma once
// How the waiting queue is ordered and bounded beside the prefix policy
// (lpm / fcfs): request priorities and the preemption they allow, the bound
// that keeps lpm from passing one request over forever, and the admission
// limits (a bounded queue, a queue timeout). Pure functions of Request; the
// Scheduler applies them.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "scheduler/request.hpp"

namespace actorlm {

// Request::priority is range-checked against this (either sign).
inline constexpr int32_t kMaxPriority = 1'000'000;

struct QueuePolicy {
  // --enable-priority-scheduling: Request::priority orders the queue before
  // anything else, picks retraction victims (least urgent first) and lets
  // an urgent waiting request take a running one's place. Off: every
  // request ranks the same, as if none had a priority.
  bool priorities = false;
  // --schedule-low-priority-values-first: smaller values are more urgent
  // (vLLM's sense). Default: larger values are (SGLang's).
  bool low_values_first = false;
  // --priority-scheduling-preemption-threshold: how many levels more urgent
  // a waiting request must be than a running one to send it back to wait
  // when the engine has no place (running limit or KV) for the newcomer.
  // The gap keeps near-equal priorities from trading places every step.
  int32_t preemption_threshold = 10;
  // --schedule-max-overtakes: under lpm, a waiting request that this many
  // later arrivals of its own rank have overtaken goes before every
  // better-matching one (then by arrival). 0: no bound.
  int32_t max_overtakes = 32;
  // --max-queued-requests: waiting requests beyond which a submission is
  // refused as overloaded (HTTP 429). 0: unbounded.
  int32_t max_queued = 0;
  // --queue-timeout: seconds a request may wait for its first admission
  // before it fails as timed out (HTTP 408). Retracted requests (already
  // running once) never time out. 0: no limit.
  double timeout_seconds = 0;

  // Tenants' fair share of the running batch (server --tenants): tenant t
  // (Request::tenant, 0 for requests of no tenant) weighs
  // tenant_weights[t]; empty: no fair share. Among waiting requests of the
  // same rank, a tenant's k-th in line goes at virtual time
  // (its running requests + k) / its weight, so under a flood from one
  // tenant the others still get their share of the places as they free up.
  std::vector<double> tenant_weights;
  bool fair_share() const { return !tenant_weights.empty(); }
  double weight(int32_t tenant) const {
    return tenant >= 0 && static_cast<size_t>(tenant) < tenant_weights.size() ? tenant_weights[static_cast<size_t>(tenant)]
                                                                               : 1.0;
  }
  // Tenants' KV quotas (the tenants file's max_kv_tokens): tenant t's
  // running requests claim at most tenant_kv_quotas[t] tokens of KV
  // between them, each claiming its prompt and output and the token it
  // computes next (kv_claim). A prefix shared by several of them counts for
  // each, so the rows they hold are never more than the quota. 0 or absent:
  // no quota.
  std::vector<int64_t> tenant_kv_quotas;
  int64_t kv_quota(int32_t tenant) const {
    return tenant >= 0 && static_cast<size_t>(tenant) < tenant_kv_quotas.size()
               ? tenant_kv_quotas[static_cast<size_t>(tenant)]
               : 0;
  }
  static int64_t kv_claim(const Request& r) { return static_cast<int64_t>(r.prompt.size() + r.output.size()) + 1; }
  // --tenant-preemption: with a fair share, when no place is free, a
  // tenant below its share may take a place from the one furthest above its
  // own (share_victim). Off: shares are met only as places free up.
  bool share_preemption = false;
  // With share_preemption, which of `running` (all of the engine's running
  // requests, holding every place) goes back to wait so that waiting `w`
  // gets a place: a request of the tenant furthest above its share of the
  // places, never more urgent than `w` and only where `movable` (not held
  // for a transfer), its newest; nullopt when `w`'s tenant is not a whole
  // place below its share or no tenant is a whole place above. Shares are
  // of the tenants running or waiting as `w`'s, by weight; after the move
  // neither tenant has crossed its share, so places never trade back.
  std::optional<size_t> share_victim(const Request& w, std::span<const Request* const> running,
                                     const std::vector<bool>& movable) const;

  // Reorders `order` (indices into `waiting`, already sorted by before())
  // so that, rank by rank, tenants take turns by their weights, counting
  // `running[t]` places each holds already (index tenant_weights.size():
  // requests of a tenant id outside the table). Within a tenant the order
  // stays.
  void share(std::span<const Request* const> waiting, std::span<const int64_t> running,
             std::vector<size_t>& order) const;

  // Larger is more urgent; 0 for every request with priorities off.
  int64_t rank(const Request& r) const;
  bool starved(const Request& r) const { return max_overtakes > 0 && r.overtaken >= max_overtakes; }
  // Whether `a` is admitted before `b`: rank, then a starved request, then
  // (lpm) the longer cached prefix, then arrival.
  bool before(const Request& a, int32_t cached_a, const Request& b, int32_t cached_b, bool lpm) const;
  // Which of two running requests goes back to wait first (KV short, or a
  // place wanted): the less urgent, then the newer.
  bool goes_back_before(const Request& a, const Request& b) const;
  // Whether waiting `w` may take running `r`'s place.
  bool may_preempt(const Request& w, const Request& r) const;
};

}  // namespace actorlm
