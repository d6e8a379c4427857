#pragma once
// The tenants one server answers (serve --tenants FILE): each its own API
// key, a weight for its share of the running batch (the scheduler's
// QueuePolicy::tenant_weights), optionally a token rate limit and a KV
// quota (QueuePolicy::tenant_kv_quotas). Tenant 0
// is the server's own --api-key, or everyone when there is no key at all;
// tenant i (1..) is the file's i-th entry.
//
// The rate limit is a bucket of tokens_per_minute tokens that refills
// continuously: a request may start while the bucket is not empty, and
// when it ends its prompt and completion tokens are taken out (so one large
// request can overdraw it, and the tenant then waits for the refill: 429
// with Retry-After). Thread-safe.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorlm {

struct TenantSpec {
  std::string name;
  std::string api_key;
  double weight = 1.0;             // (0, 1000]
  int64_t tokens_per_minute = 0;   // 0: no limit
  // The KV its running requests may claim between them, in tokens (each
  // its prompt, output and next token); 0: no quota.
  int64_t max_kv_tokens = 0;
};

// {"tenants": [{"name", "api_key", "weight", "tokens_per_minute",
// "max_kv_tokens"}, ...]}.
// std::invalid_argument naming the entry and field for anything else: a
// name that is not 1-64 of letters, digits, '.', '_', '-' (or is
// "default"), an empty key or one with a line break, a name or key given
// twice, a weight outside (0, 1000], a negative rate, a quota outside
// [0, kMaxTenantKvTokens], an unknown field.
std::vector<TenantSpec> parse_tenants(std::string_view json_text);
std::vector<TenantSpec> read_tenants_file(const std::string& path);

class Tenants {
 public:
  using Clock = std::chrono::steady_clock;

  Tenants() = default;
  Tenants(std::string default_key, std::vector<TenantSpec> specs);

  // Whether any key is asked for.
  bool keyed() const { return !default_key_.empty() || !specs_.empty(); }
  // The tenant whose key an Authorization header carries ("Bearer <key>"),
  // each key compared in constant time; nullopt when none matches. With no
  // key at all, everyone is tenant 0.
  std::optional<int32_t> tenant_of(std::string_view authorization) const;
  int32_t count() const { return static_cast<int32_t>(specs_.size()) + 1; }
  const std::string& name(int32_t tenant) const;
  // Weights by tenant (tenant 0's is 1), for the scheduler; empty without
  // tenants (no fair share to keep).
  std::vector<double> weights() const;
  // One tenant's weight (tenant 0 and unknown ids: 1).
  double weight(int32_t tenant) const;
  // KV quotas by tenant (tenant 0's: none), for the scheduler; empty when
  // no tenant has one. kv_quota: one tenant's (0: none).
  std::vector<int64_t> kv_quotas() const;
  int64_t kv_quota(int32_t tenant) const;

  // Seconds until `tenant` may start a request (its bucket is empty), or
  // nullopt when it may now; a refusal is counted.
  std::optional<int> rate_refusal(int32_t tenant, Clock::time_point now = Clock::now());
  void started(int32_t tenant);
  // A request of `tenant` ended, having used these tokens.
  void finished(int32_t tenant, int64_t prompt_tokens, int64_t completion_tokens,
                Clock::time_point now = Clock::now());

  // Prometheus text: per tenant, requests started, refused by the rate
  // limit, in flight, prompt and completion tokens.
  std::string exposition() const;

 private:
  struct State {
    double bucket = 0;  // tokens left (may be below 0)
    Clock::time_point refilled{};
    int64_t started = 0, limited = 0, in_flight = 0, prompt_tokens = 0, completion_tokens = 0;
  };
  void refill(int32_t tenant, Clock::time_point now);

  std::string default_key_;
  std::vector<TenantSpec> specs_;
  mutable std::mutex mu_;
  std::vector<State> state_;  // by tenant
};

}  // namespace actorlm
