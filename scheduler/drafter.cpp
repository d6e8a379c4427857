#include "scheduler/drafter.hpp"

#include <algorithm>

namespace actorlm {

std::optional<SpeculativeAlgorithm> parse_speculative_algorithm(const std::string& name) {
  if (name == "none" || name.empty()) return SpeculativeAlgorithm::none;
  if (name == "ngram" || name == "NGRAM") return SpeculativeAlgorithm::ngram;
  return std::nullopt;
}

const char* speculative_algorithm_name(SpeculativeAlgorithm a) {
  switch (a) {
    case SpeculativeAlgorithm::none: return "none";
    case SpeculativeAlgorithm::ngram: return "ngram";
  }
  return "none";
}

std::optional<std::string> SpeculativeConfig::refusal() const {
  if (num_draft_tokens < 1 || num_draft_tokens > kMaxDraftTokens) {
    return "the number of draft tokens must be in [1, " + std::to_string(kMaxDraftTokens) + "], not " +
           std::to_string(num_draft_tokens);
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

std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig& config) {
  switch (config.algorithm) {
    case SpeculativeAlgorithm::none: return nullptr;
    case SpeculativeAlgorithm::ngram: return std::make_unique<NgramDrafter>(config.ngram_min, config.ngram_max);
  }
  return nullptr;
}

int32_t DraftPace::want() {
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return length_;
}

void DraftPace::observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  if (accepted >= drafted) {
    length_ = std::min(limit_, length_ + 1);
    misses_ = 0;
  } else if (accepted > 0) {
    length_ = std::clamp(accepted + 1, 1, limit_);
    misses_ = 0;
  } else {
    length_ = std::max(1, length_ / 2);
    // One miss is noise; from the second in a row, 2, 4, 8, 16 steps off.
    if (++misses_ >= 2) pause_ = std::min(16, 1 << std::min(misses_ - 1, 4));
  }
}

}  // namespace actorlm
