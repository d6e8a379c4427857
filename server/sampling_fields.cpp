#include "server/sampling_fields.hpp"

#include <cstdint>
#include <limits>
#include <span>

namespace actorlm::api {

namespace {

using nlohmann::json;

struct FloatField {
  const char* key;
  double lo, hi;
  float SamplingParams::*member;
  bool lo_open = false;  // (lo, hi] rather than [lo, hi]
};

// OpenAI's ranges. repetition_penalty is a vLLM/SGLang extension; the
// sampler divides logits by it, hence a floor above zero.
constexpr FloatField kFloatFields[] = {
    {"temperature", 0, 2, &SamplingParams::temperature},
    {"top_p", 0, 1, &SamplingParams::top_p, true},
    {"min_p", 0, 1, &SamplingParams::min_p},
    {"frequency_penalty", -2, 2, &SamplingParams::frequency_penalty},
    {"presence_penalty", -2, 2, &SamplingParams::presence_penalty},
    {"repetition_penalty", 1e-3, 10, &SamplingParams::repetition_penalty},
};

constexpr int32_t kMaxTokens = 1 << 20;
constexpr const char* kOpenaiLengthKeys[] = {"max_tokens", "max_completion_tokens"};
constexpr const char* kSglangLengthKeys[] = {"max_new_tokens"};
constexpr size_t kMaxStops = 16;

std::optional<ApiError> read_stop(const FieldReader& f, std::vector<std::string>& stop) {
  const json* s = f.find("stop");
  if (!s) return std::nullopt;
  if (s->is_string()) {
    stop.push_back(s->get_ref<const std::string&>());
    return std::nullopt;
  }
  if (!s->is_array() || s->size() > kMaxStops)
    return f.error("stop", "must be a string or a list of at most 16 strings");
  for (const json& x : *s) {
    if (!x.is_string()) return f.error("stop", "must be a string or a list of at most 16 strings");
    stop.push_back(x.get_ref<const std::string&>());
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_sampling_fields(const FieldReader& f, SamplingDialect dialect,
                                             GenerateOptions& o, int& n) {
  for (const FloatField& field : kFloatFields) {
    if (auto e =
            f.number(field.key, field.lo, field.hi, &(o.sampling.*field.member), field.lo_open))
      return e;
  }
  if (auto e = f.integer<int32_t>("top_k", -1, kMaxTokens, &o.sampling.top_k)) return e;
  if (f.find("seed")) {
    if (auto e =
            f.integer<uint64_t>("seed", 0, std::numeric_limits<uint64_t>::max(), &o.sampling.seed))
      return e;
    o.sampling.has_seed = true;
  }
  if (auto e = f.integer<int>("n", 1, 16, &n)) return e;
  const std::span<const char* const> length_keys =
      dialect == SamplingDialect::openai ? std::span<const char* const>(kOpenaiLengthKeys)
                                         : kSglangLengthKeys;
  for (const char* key : length_keys) {
    if (auto e = f.integer<int32_t>(key, 1, kMaxTokens, &o.max_new_tokens)) return e;
  }
  if (auto e = read_stop(f, o.stop)) return e;
  // vLLM / SGLang extension: keep generating past end-of-sequence (benchmarks).
  return f.boolean("ignore_eos", &o.ignore_eos);
}

}  // namespace actorlm::api
