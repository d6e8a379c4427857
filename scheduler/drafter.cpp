#include "scheduler/drafter.hpp"

#include <algorithm>

namespace actorlm {

std::optional<SpeculativeAlgorithm> parse_speculative_algorithm(const std::string& name) {
  if (name == "none" || name.empty()) return SpeculativeAlgorithm::none;
  if (name == "ngram" || name == "NGRAM") return SpeculativeAlgorithm::ngram;
  if (name == "draft") return SpeculativeAlgorithm::draft;
  return std::nullopt;
}

const char* speculative_algorithm_name(SpeculativeAlgorithm a) {
  switch (a) {
    case SpeculativeAlgorithm::none: return "none";
    case SpeculativeAlgorithm::ngram: return "ngram";
    case SpeculativeAlgorithm::draft: return "draft";
  }
  return "none";
}

std::optional<std::string> SpeculativeConfig::refusal() const {
  if (num_draft_tokens < 1 || num_draft_tokens > kMaxDraftTokens) {
    return "the number of draft tokens must be in [1, " + std::to_string(kMaxDraftTokens) + "], not " +
           std::to_string(num_draft_tokens);
  }
  if (ngram_capacity < 0 || ngram_capacity > kMaxNgramCapacity) {
    return "the n-gram table's capacity must be in [0, " + std::to_string(kMaxNgramCapacity) + "], not " +
           std::to_string(ngram_capacity);
  }
  if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64) {
    return "the n-gram match window must satisfy 1 <= min <= max <= 64, not min " + std::to_string(ngram_min) +
           ", max " + std::to_string(ngram_max);
  }
  return std::nullopt;
}

std::vector<int32_t> NgramDrafter::draft(std::span<const int32_t> prompt, std::span<const int32_t> output,
                                         int32_t max_tokens) const {
  const size_t len = prompt.size() + output.size();
  auto at = [&](size_t i) { return i < prompt.size() ? prompt[i] : output[i - prompt.size()]; };
  std::vector<int32_t> out;
  if (max_tokens <= 0) return out;
  for (int32_t n = std::min<int32_t>(max_n_, static_cast<int32_t>(len) - 1); n >= min_n_; --n) {
    const auto w = static_cast<size_t>(n);
    const size_t tail = len - w;
    // The latest earlier occurrence: recent text is the likeliest to repeat.
    for (size_t start = tail; start-- > 0;) {
      size_t j = 0;
      while (j < w && at(start + j) == at(tail + j)) ++j;
      if (j < w) continue;
      for (size_t k = start + w; k < len && out.size() < static_cast<size_t>(max_tokens); ++k) out.push_back(at(k));
      return out;
    }
  }
  return out;
}

std::vector<int32_t> PredictionLookup::draft(std::span<const int32_t> prediction, std::span<const int32_t> prompt,
                                             std::span<const int32_t> output, int32_t max_tokens, size_t& at,
                                             int32_t min_context) const {
  std::vector<int32_t> out;
  if (max_tokens <= 0 || prediction.empty()) return out;
  auto take_from = [&](size_t k) {
    at = k;
    for (; k < prediction.size() && out.size() < static_cast<size_t>(max_tokens); ++k) out.push_back(prediction[k]);
  };
  // Too little output to match on: the prediction's start, while the
  // output is a prefix of it (else a match reaching into the prompt).
  if (output.size() < static_cast<size_t>(min_n_) && output.size() < prediction.size() &&
      std::equal(output.begin(), output.end(), prediction.begin())) {
    take_from(output.size());
    return out;
  }
  const size_t len = prompt.size() + output.size();
  auto ctx = [&](size_t i) { return i < prompt.size() ? prompt[i] : output[i - prompt.size()]; };
  for (int32_t n = std::min<int32_t>(max_n_, static_cast<int32_t>(len)); n >= std::max(min_n_, min_context); --n) {
    const auto w = static_cast<size_t>(n);
    if (w >= prediction.size()) continue;
    // The match's end nearest at or after `at`; failing that, the latest
    // before it (the output went back to text the prediction had earlier).
    std::optional<size_t> ahead, behind;
    for (size_t start = 0; start + w < prediction.size(); ++start) {
      size_t j = 0;
      while (j < w && prediction[start + j] == ctx(len - w + j)) ++j;
      if (j < w) continue;
      const size_t end = start + w;
      if (end >= at) {
        ahead = end;
        break;
      }
      behind = end;
    }
    if (ahead || behind) {
      take_from(ahead ? *ahead : *behind);
      return out;
    }
  }
  return out;
}

std::vector<int32_t> ModelDrafter::draft(std::span<const int32_t>, std::span<const int32_t>, int32_t max_tokens) const {
  return std::vector<int32_t>(static_cast<size_t>(std::max(max_tokens, 0)), kModelDraft);
}

std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig& config) {
  switch (config.algorithm) {
    case SpeculativeAlgorithm::none: return nullptr;
    case SpeculativeAlgorithm::ngram: return std::make_unique<NgramDrafter>(config.ngram_min, config.ngram_max);
    case SpeculativeAlgorithm::draft: return std::make_unique<ModelDrafter>();
  }
  return nullptr;
}

int32_t DraftPace::want() {
  // Forgetting at every step, verified or not: ~30 steps back to the prior.
  constexpr double kDrift = 0.97;
  kept_ *= kDrift;
  refused_ *= kDrift;
  return limit_;
}

void DraftPace::observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  // Recent verifies count most: a request's text changes character.
  constexpr double kDecay = 0.8;
  kept_ = kept_ * kDecay + accepted;
  refused_ = refused_ * kDecay + (accepted < drafted ? 1 : 0);
}

}  // namespace actorlm
