#include "server/sampling_fields.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
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

std::optional<ApiError> read_stop(const FieldReader& f, size_t max_stops, std::vector<std::string>& stop) {
  const json* s = f.find("stop");
  if (!s) return std::nullopt;
  if (s->is_string()) {
    stop.push_back(s->get_ref<const std::string&>());
    return std::nullopt;
  }
  const std::string need = "must be a string or a list of at most " + std::to_string(max_stops) + " strings";
  if (!s->is_array() || s->size() > max_stops) return f.error("stop", need);
  for (const json& x : *s) {
    if (!x.is_string()) return f.error("stop", need);
    stop.push_back(x.get_ref<const std::string&>());
  }
  return std::nullopt;
}

std::optional<ApiError> read_seed(const FieldReader& f, SamplingParams& p) {
  const json* v = f.find("seed");
  if (!v) return std::nullopt;
  if (auto u = integer_in<uint64_t>(*v, 0, std::numeric_limits<uint64_t>::max())) {
    p.seed = *u;
  } else if (auto i = integer_in<int64_t>(*v, std::numeric_limits<int64_t>::min(), -1)) {
    p.seed = static_cast<uint64_t>(*i);
  } else {
    return f.error("seed", "must be an integer in [-2^63, 2^64 - 1]");
  }
  p.has_seed = true;
  return std::nullopt;
}

// {"<token id>": bias, ...} as OpenAI sends it.
std::optional<ApiError> read_logit_bias(const FieldReader& f, SamplingParams& p) {
  const json* lb = f.find("logit_bias");
  if (!lb) return std::nullopt;
  const char* need = "must be an object of at most 1024 token ids (decimal strings) to numbers in [-100, 100]";
  if (!lb->is_object() || lb->size() > SamplingParams::kMaxLogitBias) return f.error("logit_bias", need);
  p.logit_bias.clear();
  for (const auto& [key, value] : lb->items()) {
    const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
    const int64_t id = digits ? std::stoll(key) : -1;
    if (id < 0 || id > std::numeric_limits<int32_t>::max() || !value.is_number()) return f.error("logit_bias", need);
    const double bias = value.get<double>();
    if (!(bias >= -100.0 && bias <= 100.0)) return f.error("logit_bias", need);
    p.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  std::sort(p.logit_bias.begin(), p.logit_bias.end());
  for (size_t i = 1; i < p.logit_bias.size(); ++i) {
    if (p.logit_bias[i].first == p.logit_bias[i - 1].first)
      return f.error("logit_bias", "names token " + std::to_string(p.logit_bias[i].first) + " twice");
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
  if (auto e = read_seed(f, o.sampling)) return e;
  if (dialect == SamplingDialect::openai) {
    if (auto e = read_logit_bias(f, o.sampling)) return e;
  }
  if (auto e = f.integer<int>("n", 1, 16, &n)) return e;
  const std::span<const char* const> length_keys =
      dialect == SamplingDialect::openai ? std::span<const char* const>(kOpenaiLengthKeys)
                                         : kSglangLengthKeys;
  for (const char* key : length_keys) {
    if (auto e = f.integer<int32_t>(key, 1, kMaxTokens, &o.max_new_tokens)) return e;
    // A length the client set must fit the context (checked when the prompt
    // is known); the default may be cut short by it.
    if (f.find(key)) o.max_new_tokens_strict = true;
  }
  // vLLM's min_tokens (SGLang's min_new_tokens): checked against the
  // length after both are read, whichever order the body gives them in.
  const char* min_key = dialect == SamplingDialect::openai ? "min_tokens" : "min_new_tokens";
  if (auto e = f.integer<int32_t>(min_key, 0, kMaxTokens, &o.min_new_tokens)) return e;
  if (o.min_new_tokens > o.max_new_tokens) {
    return f.error(min_key, "must not be more than the output length (" + std::to_string(o.max_new_tokens) + ")");
  }
  if (auto e = read_stop(f, dialect == SamplingDialect::openai ? 4 : 16, o.stop)) return e;
  // vLLM / SGLang extension: keep generating past end-of-sequence (benchmarks).
  return f.boolean("ignore_eos", &o.ignore_eos);
}

}  // namespace actorlm::api
