#pragma once
// How much prefill the next step may carry so that it ends within a time
// budget (--max-step-ms). The scheduler feeds it each step's shape and its
// measured duration; it keeps an exponentially weighted average of seconds
// per decode row (from decode-only steps) and seconds per prefill token
// (from steps that prefill, after taking out the decode rows riding along),
// and turns the target into a prefill token count for the next step.
//
// Why time and not a token count alone: a token count that is right for a
// 135M model on a GPU holds running streams for minutes with a 3B model on
// two CPU threads (issue 32: 4,096 prompt tokens in one step). The budget
// only ever lowers the scheduler's token limits; with no target it lowers
// nothing. Pure C++, single-threaded (the scheduler's).

#include <cstdint>
#include <optional>

namespace actorlm {

struct StepBudgetConfig {
  double target_seconds = 0;        // 0: no time budget
  // Prefill tokens of a step before any step has been measured: small, so
  // the first measurement never costs more than a fraction of a budget on
  // any model this runs.
  int64_t probe_tokens = 64;
  // Never fewer prefill tokens than this in a step that prefills, so a
  // waiting prompt always moves even when the decode rows alone fill the
  // target.
  int64_t min_prefill_tokens = 16;
  double smoothing = 0.3;           // weight of the newest measurement, (0, 1]
};

class StepBudget {
 public:
  explicit StepBudget(const StepBudgetConfig& config = {});

  bool enabled() const { return config_.target_seconds > 0; }

  // One finished step: prefill_tokens prompt tokens computed and decode_rows
  // tokens decoded, in `seconds`. Steps of nothing, or of a non-positive or
  // non-finite duration, are ignored.
  void observe(int64_t prefill_tokens, int64_t decode_rows, double seconds);

  // Most prefill tokens for a step that also decodes `decode_rows` tokens;
  // nullopt when there is no target (the token limits alone decide).
  std::optional<int64_t> prefill_tokens(int64_t decode_rows) const;
  // The same for another target (a step's length as the running streams'
  // gap between tokens: --itl-target-ms); nullopt for a target <= 0.
  std::optional<int64_t> prefill_tokens(int64_t decode_rows, double target_seconds) const;

  // The current estimates; nullopt until measured.
  std::optional<double> seconds_per_prefill_token() const { return per_token_; }
  std::optional<double> seconds_per_decode_row() const { return per_row_; }

 private:
  static void blend(std::optional<double>& avg, double sample, double weight);

  StepBudgetConfig config_;
  std::optional<double> per_token_, per_row_;
};

}  // namespace actorlm
