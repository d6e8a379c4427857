#include "kernels/cpu/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace actorlm {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

float clean(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

// log-softmax normaliser of the raw logits.
double log_sum_exp(std::span<const float> logits) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : logits) mx = std::max(mx, clean(v));
  if (!std::isfinite(mx)) throw std::domain_error("sampler: every logit is -inf or NaN");
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(clean(v)) - mx);
  return mx + std::log(sum);
}

// r.token's logprob and the top_n alternatives', all from the raw logits.
void report(std::span<const float> logits, double lse, int top_n, SampleResult& r) {
  const auto n = static_cast<int32_t>(logits.size());
  r.logprob = static_cast<float>(clean(logits[static_cast<size_t>(r.token)]) - lse);
  if (top_n <= 0) return;
  int32_t m = std::min(top_n, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + m, idx.end(), [&](int32_t a, int32_t b) {
    return clean(logits[static_cast<size_t>(a)]) > clean(logits[static_cast<size_t>(b)]);
  });
  for (int32_t i = 0; i < m; ++i) {
    int32_t t = idx[static_cast<size_t>(i)];
    r.top.emplace_back(t, static_cast<float>(clean(logits[static_cast<size_t>(t)]) - lse));
  }
}

}  // namespace

double sample_uniform(uint64_t seed, uint64_t step) {
  uint64_t bits = splitmix64(splitmix64(seed) ^ (step * 0xd1b54a32d192ed03ull));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

SampleResult sample_token(std::span<const float> logits, const SamplingParams& p,
                          std::span<const int32_t> history_prompt, std::span<const int32_t> history_output,
                          uint64_t step, int top_n, std::span<const uint32_t> allowed) {
  const auto n = static_cast<int32_t>(logits.size());
  if (n == 0) throw std::invalid_argument("sampler: empty logits");
  if (!allowed.empty() && allowed.size() != (static_cast<size_t>(n) + 31) / 32)
    throw std::invalid_argument("sampler: the allowed-token mask does not match the vocabulary");
  const double lse = log_sum_exp(logits);
  std::vector<float> x(logits.begin(), logits.end());
  for (auto& v : x) v = clean(v);
  // Structured output: a token outside the mask cannot be picked (its
  // reported logprob stays the model's, from the raw logits).
  if (!allowed.empty()) {
    for (int32_t t = 0; t < n; ++t) {
      if ((allowed[static_cast<size_t>(t) / 32] >> (t % 32) & 1u) == 0) x[static_cast<size_t>(t)] = -INFINITY;
    }
  }

  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(static_cast<size_t>(n), 0);
    for (auto span : {history_prompt, history_output}) {
      for (int32_t t : span) {
        if (t >= 0 && t < n) seen[static_cast<size_t>(t)] = 1;
      }
    }
    for (int32_t t = 0; t < n; ++t) {
      if (!seen[static_cast<size_t>(t)]) continue;
      float& v = x[static_cast<size_t>(t)];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int32_t t : history_output) {
      if (t >= 0 && t < n) ++counts[t];
    }
    for (auto [t, c] : counts) x[static_cast<size_t>(t)] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
  }
  // OpenAI's logit_bias: added to the processed logits; ids beyond this
  // vocabulary were refused before the request was admitted.
  for (const auto& [t, b] : p.logit_bias) {
    if (t >= 0 && t < n) x[static_cast<size_t>(t)] += b;
  }

  SampleResult r;
  if (p.greedy()) {
    r.token = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
  } else {
    // Candidates sorted by processed logit, best first; top-k bounds the sort.
    int32_t k = p.top_k > 0 ? std::min(p.top_k, n) : n;
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    auto better = [&](int32_t a, int32_t b) {
      return x[static_cast<size_t>(a)] > x[static_cast<size_t>(b)] || (x[static_cast<size_t>(a)] == x[static_cast<size_t>(b)] && a < b);
    };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
    idx.resize(static_cast<size_t>(k));
    float mx = x[static_cast<size_t>(idx[0])];
    if (!std::isfinite(mx)) throw std::domain_error("sampler: every processed logit is -inf");
    std::vector<double> prob(idx.size());
    double sum = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      prob[i] = std::exp((static_cast<double>(x[static_cast<size_t>(idx[i])]) - mx) / p.temperature);
      sum += prob[i];
    }
    for (auto& q : prob) q /= sum;
    size_t keep = prob.size();
    if (p.top_p < 1.0f) {
      double mass = 0;
      for (size_t i = 0; i < prob.size(); ++i) {
        mass += prob[i];
        if (mass >= p.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (p.min_p > 0.0f) {
      size_t m = 1;
      while (m < keep && prob[m] >= p.min_p * prob[0]) ++m;
      keep = m;
    }
    double total = std::accumulate(prob.begin(), prob.begin() + static_cast<ptrdiff_t>(keep), 0.0);
    double u = sample_uniform(p.has_seed ? p.seed : 0, step) * total;
    size_t pick = keep - 1;
    for (size_t i = 0; i < keep; ++i) {
      if (u < prob[i]) {
        pick = i;
        break;
      }
      u -= prob[i];
    }
    r.token = idx[pick];
  }
  report(logits, lse, top_n, r);
  return r;
}

SampleResult score_token(std::span<const float> logits, int32_t token, int top_n) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) {
    throw std::invalid_argument("score_token: token " + std::to_string(token) + " is outside the vocabulary");
  }
  SampleResult r;
  r.token = token;
  report(logits, log_sum_exp(logits), top_n, r);
  return r;
}

}  // namespace actorlm
