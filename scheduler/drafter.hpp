#pragma once
// Speculative decoding's proposals. A drafter guesses the next few tokens of
// a decoding request; the scheduler runs them through the target model in
// the request's next step (one forward over last token + drafts) and keeps
// the longest prefix the target itself samples, plus the target's own token
// after it. Verification samples each position exactly as plain decoding
// would (same logits, same seed counter, same penalties and masks), so the
// output is token for token the output without speculation; a drafter only
// decides how many of those tokens one step yields.
//
// For a drafter that proposes one token per position with certainty (both
// here do), this is the standard rejection rule: accept a draft with
// probability p_target(draft), else sample from p_target with the draft
// taken out and renormalised. A target sample equal to the draft happens
// with exactly that probability, and a sample that differs is distributed
// as the residual.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace actorlm {

enum class SpeculativeAlgorithm { none, ngram };
std::optional<SpeculativeAlgorithm> parse_speculative_algorithm(const std::string& name);
const char* speculative_algorithm_name(SpeculativeAlgorithm a);

// The longest draft a step may carry (--speculative-num-draft-tokens).
inline constexpr int32_t kMaxDraftTokens = 16;

struct SpeculativeConfig {
  SpeculativeAlgorithm algorithm = SpeculativeAlgorithm::none;
  int32_t num_draft_tokens = 4;  // most drafted tokens per request per step, 1..kMaxDraftTokens
  // N-gram lookup: the request's last n tokens (n from max down to min) are
  // looked up in its prompt and output; what followed their latest earlier
  // occurrence is the draft (SGLang's match window sizes).
  int32_t ngram_min = 2, ngram_max = 4;
  bool active() const { return algorithm != SpeculativeAlgorithm::none; }
  // Why these settings cannot run (a count out of range), if they cannot.
  std::optional<std::string> refusal() const;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // At most max_tokens guesses of what follows prompt ++ output.
  virtual std::vector<int32_t> draft(std::span<const int32_t> prompt, std::span<const int32_t> output,
                                     int32_t max_tokens) const = 0;
};

// Prompt lookup: free, and right wherever the output copies its input
// (editing code, extracting fields, quoting a document, repeated JSON keys).
class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}
  std::vector<int32_t> draft(std::span<const int32_t> prompt, std::span<const int32_t> output,
                             int32_t max_tokens) const override;

 private:
  int32_t min_n_, max_n_;
};

// The drafter `config` names; null when speculation is off.
std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig& config);

// How much one request drafts, from how its drafts fared: after a verify
// that kept every draft the length grows by one (to the limit); after one
// that kept some, it is what was kept plus one; a run of verifies that kept
// nothing halves it and then pauses drafting for a growing number of steps,
// so a request whose drafts keep failing stops paying for them.
class DraftPace {
 public:
  explicit DraftPace(int32_t limit = 0) : limit_(limit), length_(limit) {}
  // Tokens to draft this step (0: none), and the step counted.
  int32_t want();
  void observe(int32_t drafted, int32_t accepted);
  int32_t length() const { return length_; }
  bool started() const { return limit_ > 0; }

 private:
  int32_t limit_, length_;
  int32_t misses_ = 0;  // verifies in a row that kept nothing
  int32_t pause_ = 0;   // steps left without drafting
};

}  // namespace actorlm
