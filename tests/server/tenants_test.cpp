// server/tenants: the file's checks, whose key is whose, and the token
// bucket on a clock the test moves.

#include "server/tenants.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>

using namespace actorlm;
using namespace std::chrono_literals;

TEST_CASE("A tenants file is read whole or refused naming the fault", "[server][tenants]") {
  const auto t = parse_tenants(R"({"tenants": [{"name": "a", "api_key": "ka"},
                                               {"name": "b.2", "api_key": "kb", "weight": 2.5, "tokens_per_minute": 60,
                                                "max_kv_tokens": 4096}]})");
  REQUIRE(t.size() == 2);
  CHECK(t[1].name == "b.2");
  CHECK(t[1].weight == 2.5);
  CHECK(t[1].tokens_per_minute == 60);
  CHECK(t[0].max_kv_tokens == 0);
  CHECK(t[1].max_kv_tokens == 4096);
  // Quotas by tenant for the scheduler: none for tenant 0; none at all when
  // no tenant has one.
  CHECK(Tenants("", t).kv_quotas() == std::vector<int64_t>{0, 0, 4096});
  CHECK(Tenants("", t).kv_quota(2) == 4096);
  CHECK(Tenants("", t).kv_quota(7) == 0);
  CHECK(Tenants("", {t[0]}).kv_quotas().empty());
  const std::pair<const char*, const char*> bad[] = {
      {"[]", "valid JSON"},
      {R"({"tenants": [], "x": 1})", "valid JSON"},
      {R"({"tenants": [{"name": "a", "api_key": "k"}, {"name": "a", "api_key": "k2"}]})", "is taken"},
      {R"({"tenants": [{"name": "a", "api_key": "k"}, {"name": "b", "api_key": "k"}]})", "another tenant's"},
      {R"({"tenants": [{"name": "default", "api_key": "k"}]})", "a name is"},
      {R"({"tenants": [{"name": "a", "api_key": ""}]})", "api_key must be"},
      {R"({"tenants": [{"name": "a", "api_key": "k\nx"}]})", "api_key must be"},
      {R"({"tenants": [{"name": "a", "api_key": "k", "weight": 1001}]})", "weight"},
      {R"({"tenants": [{"name": "a", "api_key": "k", "tokens_per_minute": -1}]})", "tokens_per_minute"},
      {R"({"tenants": [{"name": "a", "api_key": "k", "tokens_per_minute": 1.5}]})", "is not a field"},
      {R"({"tenants": [7]})", "not an object"},
      {R"({"tenants": [{"name": "a", "api_key": "k", "max_kv_tokens": -5}]})", "max_kv_tokens must be in"},
      {R"({"tenants": [{"name": "a", "api_key": "k", "max_kv_tokens": 2199023255553}]})", "max_kv_tokens must be in"},
      {R"({"tenants": [{"name": "a", "api_key": "k", "max_kv_tokens": "9"}]})", "is not a field"},
  };
  for (const auto& [text, why] : bad) {
    INFO(text);
    CHECK_THROWS_WITH(parse_tenants(text), Catch::Contains(why));
  }
}

TEST_CASE("Each key names its tenant, and a rate bucket refuses until it refills", "[server][tenants]") {
  Tenants tenants("admin", parse_tenants(R"({"tenants": [{"name": "a", "api_key": "ka", "weight": 3},
                                                          {"name": "c", "api_key": "kc", "tokens_per_minute": 120}]})"));
  CHECK(tenants.keyed());
  CHECK(tenants.tenant_of("Bearer admin") == 0);
  CHECK(tenants.tenant_of("Bearer ka") == 1);
  CHECK(tenants.tenant_of("Bearer kc") == 2);
  CHECK_FALSE(tenants.tenant_of("Bearer k"));
  CHECK_FALSE(tenants.tenant_of("ka"));
  CHECK_FALSE(tenants.tenant_of(""));
  CHECK(tenants.weights() == std::vector<double>{1.0, 3.0, 1.0});
  CHECK(tenants.name(2) == "c");
  CHECK(tenants.name(9) == "default");
  CHECK_THROWS_AS(Tenants("ka", parse_tenants(R"({"tenants": [{"name": "a", "api_key": "ka"}]})")), std::invalid_argument);

  // c: 120 tokens a minute, two a second. A request of 150 tokens overdraws
  // the full bucket to -30: refused for 16 s (until one token is back).
  const auto t0 = Tenants::Clock::now();
  CHECK_FALSE(tenants.rate_refusal(2, t0));
  tenants.started(2);
  tenants.finished(2, 50, 100, t0);
  const auto wait = tenants.rate_refusal(2, t0);
  REQUIRE(wait);
  CHECK(*wait == 16);
  CHECK(tenants.rate_refusal(2, t0 + 10s) == 6);
  CHECK_FALSE(tenants.rate_refusal(2, t0 + 16s));
  // The bucket never holds more than a minute's tokens.
  CHECK_FALSE(tenants.rate_refusal(2, t0 + 1h));
  tenants.started(2);
  tenants.finished(2, 0, 121, t0 + 1h);
  CHECK(tenants.rate_refusal(2, t0 + 1h) == 1);
  // Tenants without a rate are never refused.
  tenants.finished(1, 1'000'000, 0, t0);
  CHECK_FALSE(tenants.rate_refusal(1, t0));
  const std::string text = tenants.exposition();
  CHECK(text.find("actorlm_tenant_rate_limited_total{tenant=\"c\"} 3") != std::string::npos);
  CHECK(text.find("actorlm_tenant_completion_tokens_total{tenant=\"c\"} 221") != std::string::npos);
  CHECK(text.find("actorlm_tenant_requests_in_flight{tenant=\"c\"} 0") != std::string::npos);

  Tenants open;
  CHECK_FALSE(open.keyed());
  CHECK(open.tenant_of("") == 0);
  CHECK(open.weights().empty());
  CHECK(open.exposition().empty());
}
