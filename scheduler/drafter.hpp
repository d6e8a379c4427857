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

// ngram: prompt lookup (NgramDrafter). draft: a smaller model with the same
// vocabulary in the worker (model/draft_model.hpp), which the scheduler
// only reserves rows for (ModelDrafter).
enum class SpeculativeAlgorithm { none, ngram, draft };
std::optional<SpeculativeAlgorithm> parse_speculative_algorithm(const std::string& name);
const char* speculative_algorithm_name(SpeculativeAlgorithm a);

// The longest draft a step may carry (--speculative-num-draft-tokens).
inline constexpr int32_t kMaxDraftTokens = 16;
// The most contexts the shared n-gram table may hold (~64 bytes each).
inline constexpr int64_t kMaxNgramCapacity = int64_t{1} << 24;
// The longest predicted output a request may bring (Request::prediction):
// each step searches it, so its length is bounded apart from the context.
inline constexpr int32_t kMaxPredictionTokens = 32768;

struct SpeculativeConfig {
  SpeculativeAlgorithm algorithm = SpeculativeAlgorithm::none;
  int32_t num_draft_tokens = 4;  // most drafted tokens per request per step, 1..kMaxDraftTokens
  // N-gram lookup: the request's last n tokens (n from max down to min) are
  // looked up in its prompt and output; what followed their latest earlier
  // occurrence is the draft (SGLang's match window sizes).
  int32_t ngram_min = 2, ngram_max = 4;
  // Contexts the n-gram drafter remembers from finished requests
  // (NgramTable; --speculative-ngram-capacity); 0: none, each request
  // drafts from its own text only.
  int64_t ngram_capacity = 0;
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

// OpenAI's predicted outputs: the caller sends text it expects the output
// to repeat with changes (code with one function edited, a document with a
// field filled in). The output's last n tokens (n from max down to min) are
// found in the prediction and what follows them there is the draft. Where
// they occur several times (repeated lines), the occurrence nearest after
// where the output was last found wins, so the draft follows the
// prediction front to back. Before the output has min_n tokens, a
// prediction it begins is drafted from its start.
class PredictionLookup {
 public:
  PredictionLookup(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}
  // `at`: the prediction's index just past the last match (0 at first);
  // moved to this match's end. Only tails of min_context tokens or more
  // are matched (0: min_n); the prediction's start is drafted either way.
  std::vector<int32_t> draft(std::span<const int32_t> prediction, std::span<const int32_t> prompt,
                             std::span<const int32_t> output, int32_t max_tokens, size_t& at,
                             int32_t min_context = 0) const;

 private:
  int32_t min_n_, max_n_;
};

// A draft token the worker's draft model fills in: the scheduler plans the
// step's rows and masks without knowing it, and learns it from the results
// (SampleResult::draft).
inline constexpr int32_t kModelDraft = -1;

// The draft model's share on the scheduler's side: max_tokens placeholders
// (kModelDraft), so a verify's rows and KV are planned as for any draft.
class ModelDrafter final : public Drafter {
 public:
  std::vector<int32_t> draft(std::span<const int32_t> prompt, std::span<const int32_t> output,
                             int32_t max_tokens) const override;
};

// The drafter `config` names; null when speculation is off.
std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig& config);

// How one request's drafts fare: an estimate of the chance that its next
// draft token is kept (drafts are kept up to the first the model does not
// sample, so a draft of n tokens has its j-th kept with about rate^j).
// DraftCost (draft_cost.hpp) turns a low rate into no drafts, so a request whose drafts are
// rejected stops paying for them; each step without a verify lets the
// estimate drift back towards the engine's, so it tries again later (its
// text may have changed character).
class DraftPace {
 public:
  explicit DraftPace(int32_t limit = 0) : limit_(limit) {}
  // Most tokens to draft this step; counts the step.
  int32_t want();
  void observe(int32_t drafted, int32_t accepted);
  // The chance its next draft token is kept; `prior` (the engine's rate)
  // weighs as two draft tokens, so a new request starts from it.
  double rate(double prior) const { return (kept_ + 2 * prior) / (kept_ + refused_ + 2); }
  bool started() const { return limit_ > 0; }

 private:
  int32_t limit_;
  double kept_ = 0, refused_ = 0;  // draft tokens kept and rejections, decayed
};

}  // namespace actorlm
