// DraftCost on its own: the step-time curve it keeps, and the drafts it
// chooses by it, in simulated runs over known curves (what a step of n rows
// costs, and how likely each draft is kept).

#include "scheduler/draft_cost.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>

using namespace actorlm;

namespace {

// The expected tokens a request yields with `drafts` drafts, each kept with
// `chance` given the one before: its own token plus chance + chance^2 + ...
double yield_of(int32_t drafts, double chance) {
  double t = 1, q = 1;
  for (int32_t j = 0; j < drafts; ++j) t += q *= chance;
  return t;
}

struct Run {
  double tokens = 0, seconds = 0;
  std::map<int64_t, int> sizes;  // steps by rows
  double rate() const { return tokens / seconds; }
};

// `steps` decode steps of `streams` requests, each with `drafts` drafts kept
// with `chance`, costing curve(rows) seconds; the first `warm` steps are
// not counted.
Run simulate(DraftCost& cost, int64_t streams, int32_t drafts, double chance,
             const std::function<double(int64_t)>& curve, int steps, int warm = 0) {
  Run run;
  const std::vector<int32_t> available(static_cast<size_t>(streams), drafts);
  const std::vector<double> rate(static_cast<size_t>(streams), chance);
  for (int s = 0; s < steps; ++s) {
    const std::vector<int32_t> keep = cost.allot(available, rate, streams);
    REQUIRE(keep.size() == available.size());
    int64_t rows = streams;
    double tokens = 0;
    for (int32_t k : keep) {
      REQUIRE(k >= 0);
      REQUIRE(k <= drafts);
      rows += k;
      tokens += yield_of(k, chance);
    }
    cost.observe(rows, curve(rows));
    if (s < warm) continue;
    run.tokens += tokens;
    run.seconds += curve(rows);
    ++run.sizes[rows];
  }
  return run;
}

// Tokens a second with every request capped at `drafts` drafts.
double fixed_rate(int64_t streams, int32_t drafts, double chance, const std::function<double(int64_t)>& curve) {
  return static_cast<double>(streams) * yield_of(drafts, chance) / curve(streams * (1 + drafts));
}

}  // namespace

TEST_CASE("Draft rows are kept while their chance beats what a row's time buys", "[draft_cost]") {
  DraftCost cost;
  const std::vector<int32_t> four{4, 4};
  // Unmeasured: everything (its steps are how it learns).
  CHECK(cost.allot(four, std::vector<double>{0.1, 0.1}, 2) == four);
  CHECK_FALSE(cost.seconds(3));
  // Steps of 1..8 rows at 5 ms + 1 ms a row.
  for (int rep = 0; rep < 3; ++rep) {
    for (int64_t rows = 1; rows <= 8; ++rows) cost.observe(rows, 0.005 + 0.001 * static_cast<double>(rows));
  }
  REQUIRE(cost.fitted());
  CHECK(cost.row_seconds() == Approx(0.001));
  CHECK(cost.fixed_seconds() == Approx(0.005));
  // One stream: a row is a sixth of the step, so drafts kept half the time
  // pay for two rows (chances 0.5, 0.25), not a third (0.125).
  const std::vector<int32_t> one{4};
  CHECK(cost.allot(one, std::vector<double>{0.5}, 1) == std::vector<int32_t>{2});
  // Sixteen streams, a size never measured: first a probe of plain decoding.
  CHECK(cost.allot(one, std::vector<double>{0.5}, 16) == std::vector<int32_t>{0});
  // Then by the line (16 and 17 rows: 21 and 22 ms): a row buys 0.76
  // tokens' time, a half-likely draft nothing.
  CHECK(cost.seconds(16).value() == Approx(0.021));
  CHECK(cost.allot(one, std::vector<double>{0.5}, 16) == std::vector<int32_t>{0});
  // A 90% draft pays for two (16.9 tokens in 22 ms, 17.71 in 23, 18.44 in 24).
  CHECK(cost.allot(one, std::vector<double>{0.9}, 16) == std::vector<int32_t>{2});
  // The likeliest drafts first: a request that keeps 90% gets four rows,
  // one that keeps 30% none.
  CHECK(cost.allot(four, std::vector<double>{0.9, 0.3}, 2) == std::vector<int32_t>{4, 0});
  CHECK(cost.allot(std::vector<int32_t>{0, 3}, std::vector<double>{0.9, 0.9}, 2) == std::vector<int32_t>{0, 3});
  // Steps all of one size say nothing about a row's cost: no line.
  DraftCost flat;
  for (int i = 0; i < 50; ++i) flat.observe(4, 0.01);
  CHECK_FALSE(flat.fitted());
  flat.observe(0, 0.01);
  flat.observe(4, -1);
  flat.observe(4, std::nan(""));
  CHECK(flat.seconds(4).value() == Approx(0.01));
}

TEST_CASE("Each step size's time is its own, and sizes between are read off their neighbours", "[draft_cost]") {
  DraftCost cost;
  for (int i = 0; i < 4; ++i) {
    cost.observe(8, 0.080);
    cost.observe(32, 0.200);
    cost.observe(40, 0.500);  // past a jump
  }
  CHECK(cost.seconds(8).value() == Approx(0.080));
  CHECK(cost.seconds(40).value() == Approx(0.500));
  CHECK(cost.seconds(20).value() == Approx(0.140));  // halfway from 8 to 32
  CHECK(cost.seconds(36).value() == Approx(0.350));
  // Below the smallest size: never less than its share of that step.
  CHECK(cost.seconds(4).value() >= 0.040 - 1e-12);
  CHECK(cost.seconds(4).value() < 0.080);
  // Above the largest: the line through these steps would start below
  // zero, so not the line's slope but the two largest sizes' (37.5 ms a row).
  CHECK_FALSE(cost.fitted());
  CHECK(cost.seconds(48).value() == Approx(0.800));
  // The newest steps of a size count most.
  for (int i = 0; i < 20; ++i) cost.observe(8, 0.040);
  CHECK(cost.seconds(8).value() == Approx(0.040).epsilon(0.01));
  CHECK_FALSE(cost.seconds(0));
}

// A float32 target at 8 streams on a Zen 3 VM: products of up to 32 rows
// read each weight once, larger ones went through sgemm, a jump the
// straight line could not see; drafts kept 96% of the time lost to plain
// decoding there.
TEST_CASE("Drafts stop where the step's cost jumps, at the best size the curve has", "[draft_cost]") {
  const auto curve = [](int64_t rows) {
    return 0.060 + 0.0085 * static_cast<double>(rows) + (rows > 32 ? 0.120 : 0.0);
  };
  const double plain = fixed_rate(8, 0, 0.96, curve);
  const double three = fixed_rate(8, 3, 0.96, curve);  // 32 rows: the best
  const double four = fixed_rate(8, 4, 0.96, curve);   // 40: every draft
  REQUIRE(three > four);
  REQUIRE(four > plain);
  DraftCost cost;
  const Run run = simulate(cost, 8, 4, 0.96, curve, 600, 100);
  INFO("tokens/s " << run.rate() << "; fixed: plain " << plain << ", 3 drafts " << three << ", 4 " << four);
  CHECK(run.rate() > 0.95 * three);
  CHECK(run.sizes.at(32) > 450);
}

TEST_CASE("Drafts that cost more than they yield are not sent, but for probes", "[draft_cost]") {
  // No fixed part: every row costs the same, so a half-likely draft never pays.
  const auto curve = [](int64_t rows) { return 0.010 * static_cast<double>(rows); };
  DraftCost cost;
  const Run run = simulate(cost, 8, 4, 0.5, curve, 600, 50);
  const double plain = fixed_rate(8, 0, 0.5, curve);
  INFO("tokens/s " << run.rate() << " against " << plain << " plain");
  CHECK(run.rate() > 0.95 * plain);
  CHECK(run.sizes.at(8) > 500);
}

TEST_CASE("Where rows cost nothing every draft is sent", "[draft_cost]") {
  const auto curve = [](int64_t) { return 0.005; };
  DraftCost cost;
  const Run run = simulate(cost, 4, 4, 0.3, curve, 600);
  CHECK(run.sizes.at(20) > 560);
  CHECK(run.rate() > 0.97 * fixed_rate(4, 4, 0.3, curve));
}

TEST_CASE("A size not seen for a while is measured again, so the choice follows the machine", "[draft_cost]") {
  bool jump = true;
  const auto curve = [&jump](int64_t rows) {
    return 0.060 + 0.0085 * static_cast<double>(rows) + (jump && rows > 32 ? 0.120 : 0.0);
  };
  DraftCost cost;
  Run before = simulate(cost, 8, 4, 0.96, curve, 400, 100);
  CHECK(before.sizes.at(32) > 250);
  // The jump goes (another kernel, a quieter machine): within a stale
  // period and a probe every draft is sent.
  jump = false;
  simulate(cost, 8, 4, 0.96, curve, static_cast<int>(DraftCost::kStale + 4 * DraftCost::kProbeEvery));
  Run after = simulate(cost, 8, 4, 0.96, curve, 200);
  CHECK(after.sizes[40] > 180);
}
