#include "server/tenants.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "scheduler/request.hpp"
#include "server/http_guard.hpp"

namespace actorlm {
namespace {

bool valid_name(const std::string& n) {
  return !n.empty() && n.size() <= 64 && n != "default" &&
         n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == std::string::npos;
}

// A name is written into /metrics labels: only the characters valid_name allows.
const std::string kDefault = "default";

}  // namespace

std::vector<TenantSpec> parse_tenants(std::string_view json_text) {
  const auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tenants") || !j["tenants"].is_array() || j.size() != 1) {
    throw std::invalid_argument("tenants: the file must hold {\"tenants\": [...]}, valid JSON");
  }
  if (j["tenants"].size() > 1024) throw std::invalid_argument("tenants: at most 1024");
  std::vector<TenantSpec> out;
  std::set<std::string> names, keys;
  for (size_t i = 0; i < j["tenants"].size(); ++i) {
    const auto& e = j["tenants"][i];
    const std::string where = "tenants: entry " + std::to_string(i);
    if (!e.is_object()) throw std::invalid_argument(where + " is not an object");
    TenantSpec t;
    for (const auto& [key, value] : e.items()) {
      if (key == "name" && value.is_string()) {
        t.name = value.get<std::string>();
      } else if (key == "api_key" && value.is_string()) {
        t.api_key = value.get<std::string>();
      } else if (key == "weight" && value.is_number()) {
        t.weight = value.get<double>();
      } else if (key == "tokens_per_minute" && value.is_number_integer()) {
        t.tokens_per_minute = value.get<int64_t>();
      } else if (key == "max_kv_tokens" && value.is_number_integer()) {
        t.max_kv_tokens = value.get<int64_t>();
      } else {
        throw std::invalid_argument(where + ": '" + key.substr(0, 64) +
                                    "' is not a field (name, api_key: strings; weight: a number; "
                                    "tokens_per_minute, max_kv_tokens: integers)");
      }
    }
    if (!valid_name(t.name)) {
      throw std::invalid_argument(where + ": a name is 1-64 of letters, digits, '.', '_' and '-' (not 'default')");
    }
    if (t.api_key.empty() || t.api_key.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
      throw std::invalid_argument(where + " (" + t.name + "): api_key must be non-empty, on one line");
    }
    if (!(t.weight > 0 && t.weight <= 1000)) throw std::invalid_argument(where + " (" + t.name + "): weight must be in (0, 1000]");
    if (t.tokens_per_minute < 0) throw std::invalid_argument(where + " (" + t.name + "): tokens_per_minute must be >= 0");
    if (t.max_kv_tokens < 0 || t.max_kv_tokens > kMaxTenantKvTokens) {
      throw std::invalid_argument(where + " (" + t.name + "): max_kv_tokens must be in [0, " +
                                  std::to_string(kMaxTenantKvTokens) + "] (0: no quota)");
    }
    if (!names.insert(t.name).second) throw std::invalid_argument(where + ": the name " + t.name + " is taken");
    if (!keys.insert(t.api_key).second) throw std::invalid_argument(where + " (" + t.name + "): its api_key is another tenant's");
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TenantSpec> read_tenants_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("tenants: cannot read " + path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > (1u << 20)) throw std::invalid_argument("tenants: " + path + " is over 1 MiB");
  return parse_tenants(text);
}

Tenants::Tenants(std::string default_key, std::vector<TenantSpec> specs)
    : default_key_(std::move(default_key)), specs_(std::move(specs)), state_(specs_.size() + 1) {
  for (size_t t = 0; t < specs_.size(); ++t) {
    if (specs_[t].api_key == default_key_) throw std::invalid_argument("tenants: " + specs_[t].name + " has the --api-key");
    state_[t + 1].bucket = static_cast<double>(specs_[t].tokens_per_minute);
    state_[t + 1].refilled = Clock::now();
  }
}

std::optional<int32_t> Tenants::tenant_of(std::string_view authorization) const {
  if (!keyed()) return 0;
  std::optional<int32_t> found;
  // Every key is compared (no early exit), so timing says nothing of which.
  if (!default_key_.empty() && http::bearer_matches(authorization, default_key_)) found = 0;
  for (size_t t = 0; t < specs_.size(); ++t) {
    if (http::bearer_matches(authorization, specs_[t].api_key) && !found) found = static_cast<int32_t>(t + 1);
  }
  return found;
}

const std::string& Tenants::name(int32_t tenant) const {
  return tenant >= 1 && static_cast<size_t>(tenant) <= specs_.size() ? specs_[static_cast<size_t>(tenant - 1)].name
                                                                      : kDefault;
}

double Tenants::weight(int32_t tenant) const {
  return tenant >= 1 && tenant <= static_cast<int32_t>(specs_.size()) ? specs_[static_cast<size_t>(tenant - 1)].weight : 1.0;
}

int64_t Tenants::kv_quota(int32_t tenant) const {
  return tenant >= 1 && tenant <= static_cast<int32_t>(specs_.size()) ? specs_[static_cast<size_t>(tenant - 1)].max_kv_tokens : 0;
}

std::vector<int64_t> Tenants::kv_quotas() const {
  std::vector<int64_t> q{0};
  for (const TenantSpec& t : specs_) q.push_back(t.max_kv_tokens);
  // No quota anywhere: nothing for the scheduler to keep.
  return std::all_of(q.begin(), q.end(), [](int64_t v) { return v == 0; }) ? std::vector<int64_t>{} : q;
}

std::vector<double> Tenants::weights() const {
  if (specs_.empty()) return {};
  std::vector<double> w{1.0};
  for (const TenantSpec& t : specs_) w.push_back(t.weight);
  return w;
}

void Tenants::refill(int32_t tenant, Clock::time_point now) {
  State& s = state_[static_cast<size_t>(tenant)];
  const int64_t tpm = tenant >= 1 ? specs_[static_cast<size_t>(tenant - 1)].tokens_per_minute : 0;
  if (tpm <= 0) return;
  const double seconds = std::chrono::duration<double>(now - s.refilled).count();
  s.bucket = std::min(static_cast<double>(tpm), s.bucket + seconds * static_cast<double>(tpm) / 60.0);
  s.refilled = now;
}

std::optional<int> Tenants::rate_refusal(int32_t tenant, Clock::time_point now) {
  if (tenant < 1 || static_cast<size_t>(tenant) > specs_.size()) return std::nullopt;
  const int64_t tpm = specs_[static_cast<size_t>(tenant - 1)].tokens_per_minute;
  if (tpm <= 0) return std::nullopt;
  std::lock_guard lock(mu_);
  refill(tenant, now);
  State& s = state_[static_cast<size_t>(tenant)];
  if (s.bucket > 0) return std::nullopt;
  ++s.limited;
  // Until the bucket holds a token again.
  return std::max(1, static_cast<int>(std::ceil((1.0 - s.bucket) * 60.0 / static_cast<double>(tpm))));
}

void Tenants::started(int32_t tenant) {
  if (tenant < 0 || tenant >= count()) return;
  std::lock_guard lock(mu_);
  ++state_[static_cast<size_t>(tenant)].started;
  ++state_[static_cast<size_t>(tenant)].in_flight;
}

void Tenants::finished(int32_t tenant, int64_t prompt_tokens, int64_t completion_tokens, Clock::time_point now) {
  if (tenant < 0 || tenant >= count()) return;
  std::lock_guard lock(mu_);
  refill(tenant, now);
  State& s = state_[static_cast<size_t>(tenant)];
  --s.in_flight;
  s.prompt_tokens += prompt_tokens;
  s.completion_tokens += completion_tokens;
  if (tenant >= 1 && specs_[static_cast<size_t>(tenant - 1)].tokens_per_minute > 0) {
    s.bucket -= static_cast<double>(prompt_tokens + completion_tokens);
  }
}

std::string Tenants::exposition() const {
  if (specs_.empty()) return "";
  std::lock_guard lock(mu_);
  std::string out;
  auto family = [&](const char* metric, const char* type, const char* help, auto field) {
    out += std::string("# HELP ") + metric + " " + help + "\n# TYPE " + metric + " " + type + "\n";
    for (int32_t t = 0; t < count(); ++t) {
      out += std::string(metric) + "{tenant=\"" + name(t) + "\"} " + std::to_string(field(state_[static_cast<size_t>(t)])) + "\n";
    }
  };
  family("actorlm_tenant_requests_total", "counter", "Generation requests a tenant started.",
         [](const State& s) { return s.started; });
  family("actorlm_tenant_rate_limited_total", "counter", "Requests refused by a tenant's token rate limit (429).",
         [](const State& s) { return s.limited; });
  family("actorlm_tenant_requests_in_flight", "gauge", "A tenant's requests started and not yet answered.",
         [](const State& s) { return s.in_flight; });
  family("actorlm_tenant_prompt_tokens_total", "counter", "Prompt tokens of a tenant's finished requests.",
         [](const State& s) { return s.prompt_tokens; });
  family("actorlm_tenant_completion_tokens_total", "counter", "Completion tokens of a tenant's finished requests.",
         [](const State& s) { return s.completion_tokens; });
  return out;
}

}  // namespace actorlm
