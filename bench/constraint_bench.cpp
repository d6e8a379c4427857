// What structured output costs per generated token on the CPU backend: the
// time to compute one allowed-token mask (xgrammar over the default model's
// 49,152-token vocabulary) and to accept the token, against the time of one
// decode step, and the inter-token time of a constrained request against an
// unconstrained one through the whole engine. Medians of `rounds` runs,
// constrained and unconstrained alternating.
//
//   ./build/bench/constraint_bench [threads=2] [rounds=5]

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "grammar/token_bytes.hpp"
#include "model/default_model.hpp"
#include "model/gguf_file.hpp"

using namespace actorlm;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const std::string kSchema =
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer",)"
    R"( "minimum": 0, "maximum": 120}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},)"
    R"( "required": ["name", "age", "tags"], "additionalProperties": false})";
const std::string kDocument = R"({"name": "Ada Lovelace", "age": 36, "tags": ["math", "poetry", "engines"]})";

// Microseconds per token for mask + accept, feeding kDocument's tokens.
double mask_us(ConstraintCompiler& compiler, const Tokenizer& tok, const ConstraintSpec& spec) {
  const auto ids = tok.encode(kDocument, false, false);
  std::vector<uint32_t> mask(mask_words(compiler.vocab_size()));
  auto state = compiler.start(spec);
  const auto t0 = Clock::now();
  for (int32_t id : ids) {
    state->allowed(mask);
    if (!state->accept(id)) {
      std::fprintf(stderr, "the document does not fit the constraint\n");
      std::exit(1);
    }
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(ids.size());
}

// Milliseconds between successive tokens of one greedy request.
double inter_token_ms(Engine& engine, const ConstraintSpec& spec, int32_t tokens) {
  GenerateOptions o;
  o.chat = true;
  o.messages = {{"user", "Describe a famous scientist as JSON with name, age and tags."}};
  o.sampling.temperature = 0;
  o.max_new_tokens = tokens;
  o.ignore_eos = !spec.active();
  o.constraint = spec;
  std::vector<Clock::time_point> at;
  engine.generate(o, [&](const TextDeltaEvent& d) {
    for (int i = 0; i < std::max(1, d.completion_tokens - static_cast<int32_t>(at.size())); ++i) at.push_back(Clock::now());
  });
  if (at.size() < 3) return 0;
  return std::chrono::duration<double, std::milli>(at.back() - at[1]).count() / static_cast<double>(at.size() - 2);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(default_model_path()));

  const auto c0 = Clock::now();
  auto compiler = make_constraint_compiler(tok, tok.vocab_size(), 2);
  const double vocab_ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
  const auto c1 = Clock::now();
  compiler->start({ConstraintKind::json_schema, kSchema});
  const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - c1).count();

  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  EngineConfig config;
  config.model_path = default_model_path();
  config.threads = threads;
  config.kv_tokens = 8192;
  Engine engine(system, config);

  std::vector<double> schema_mask, object_mask, plain_ms, constrained_ms;
  for (int r = 0; r < rounds; ++r) {
    schema_mask.push_back(mask_us(*compiler, tok, {ConstraintKind::json_schema, kSchema}));
    object_mask.push_back(mask_us(*compiler, tok, {ConstraintKind::json_object, ""}));
    plain_ms.push_back(inter_token_ms(engine, {}, 48));
    constrained_ms.push_back(inter_token_ms(engine, {ConstraintKind::json_schema, kSchema}, 48));
  }
  const double step_us = 1000 * median(plain_ms);
  std::printf("vocabulary index: %.0f ms once per engine; schema compile: %.1f ms once per schema\n", vocab_ms,
              compile_ms);
  std::printf("mask + accept per token: json_schema %.1f us (%.1f%% of a %.2f ms decode step), json_object %.1f us (%.1f%%)\n",
              median(schema_mask), 100 * median(schema_mask) / step_us, step_us / 1000, median(object_mask),
              100 * median(object_mask) / step_us);
  std::printf("engine inter-token time, 1 request, %d threads: unconstrained %.2f ms, json_schema %.2f ms (%.2fx)\n",
              threads, median(plain_ms), median(constrained_ms), median(constrained_ms) / median(plain_ms));
  return 0;
}
