#include "scheduler/step_budget.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace actorlm {

StepBudget::StepBudget(const StepBudgetConfig& config) : config_(config) {
  if (!(config_.target_seconds >= 0) || !std::isfinite(config_.target_seconds)) {
    throw std::invalid_argument("the step time budget must be a finite number of seconds >= 0");
  }
  if (config_.probe_tokens < 1 || config_.min_prefill_tokens < 1) {
    throw std::invalid_argument("the step budget's probe and minimum must be at least one token");
  }
  if (!(config_.smoothing > 0 && config_.smoothing <= 1)) {
    throw std::invalid_argument("the step budget's smoothing must be in (0, 1]");
  }
}

void StepBudget::blend(std::optional<double>& avg, double sample, double weight) {
  avg = avg ? (1 - weight) * *avg + weight * sample : sample;
}

void StepBudget::observe(int64_t prefill_tokens, int64_t decode_rows, double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds) || prefill_tokens < 0 || decode_rows < 0) return;
  if (prefill_tokens == 0) {
    // A decode-only step: its fixed costs (messages, sampling, the step's
    // bookkeeping) are charged to its rows, which errs towards smaller
    // prefills when the decode batch is small.
    if (decode_rows > 0) blend(per_row_, seconds / double(decode_rows), config_.smoothing);
    return;
  }
  // A step that prefills: what the decode rows would have cost alone is
  // taken out. The rest is the prefill's, but never less than a tenth of
  // the step: a per-row estimate from other batch sizes can exceed a mixed
  // step's whole time, and a near-zero per-token cost would ask for an
  // enormous next step.
  double rest = seconds - (per_row_ ? *per_row_ * double(decode_rows) : 0.0);
  rest = std::max(rest, 0.1 * seconds);
  // A small prefill beside many decode rows says little about the prefill's
  // own cost: its sample counts in proportion to its share of the step's
  // tokens.
  const double share = double(prefill_tokens) / double(prefill_tokens + decode_rows);
  blend(per_token_, rest / double(prefill_tokens), config_.smoothing * share);
}

std::optional<int64_t> StepBudget::prefill_tokens(int64_t decode_rows) const {
  return prefill_tokens(decode_rows, config_.target_seconds);
}

std::optional<int64_t> StepBudget::prefill_tokens(int64_t decode_rows, double target_seconds) const {
  if (!(target_seconds > 0)) return std::nullopt;
  if (!per_token_) return config_.probe_tokens;
  const double left = target_seconds - (per_row_ ? *per_row_ * double(std::max<int64_t>(decode_rows, 0)) : 0.0);
  const double tokens = left / std::max(*per_token_, 1e-12);
  // Clamp before converting: a tiny cost must not overflow the integer.
  const double capped = std::clamp(tokens, double(config_.min_prefill_tokens), double(int64_t{1} << 40));
  return static_cast<int64_t>(capped);
}

}  // namespace actorlm
