// Fuzzes structured output's inputs (grammar/constraint.hpp): a client's
// JSON schema, regular expression or EBNF grammar, compiled by xgrammar's
// core against a small vocabulary, then walked token by token. Contract:
// what does not compile is a ConstraintError (nothing else escapes); a token
// the mask allows is accepted, one it forbids is refused and leaves the
// state as it was.
//
// Input: byte 0 % 3 picks json_schema, regex or ebnf; byte 1 steers the walk
// (which allowed token to take, when to try a forbidden one); the rest is
// the schema, regex or grammar text.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "grammar/constraint.hpp"

using namespace actorlm;

namespace {

// Every byte as a token, a few JSON-shaped pieces, and an end token ("": no
// text; allowed only when the constraint is complete).
std::vector<std::string> vocabulary() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"{\"", "\": ", "\", \"", "\"}", "true", "false", "null", "[1, ", "abc", "12", ", ", "é"}) {
    v.push_back(piece);
  }
  v.push_back("");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const std::vector<std::string> vocab = vocabulary();
  const auto end_token = static_cast<int32_t>(vocab.size() - 1);
  static const ConstraintKind kinds[] = {ConstraintKind::json_schema, ConstraintKind::regex, ConstraintKind::ebnf};
  const ConstraintSpec spec{kinds[data[0] % 3], std::string(reinterpret_cast<const char*>(data + 2), size - 2)};
  uint32_t steer = data[1];
  // One compiler for many inputs: building its vocabulary's tables costs
  // more than compiling most inputs. It is made again every 256 inputs, so
  // its cache (every grammar it compiled, by text) stays small, and a cached
  // grammar is still started and walked like a new one.
  static std::unique_ptr<ConstraintCompiler> shared;
  static int uses = 0;
  if (!shared || ++uses % 256 == 0) shared = std::make_unique<ConstraintCompiler>(vocab, std::vector<int32_t>{end_token}, 1);
  ConstraintCompiler& compiler = *shared;
  std::unique_ptr<ConstraintState> state;
  try {
    state = compiler.start(spec);
  } catch (const ConstraintError& e) {
    if (std::string(e.what()).empty()) std::abort();
    return 0;
  }
  std::vector<uint32_t> mask(mask_words(compiler.vocab_size()));
  for (int step = 0; step < 32 && !state->complete(); ++step) {
    std::fill(mask.begin(), mask.end(), 0u);
    state->allowed(mask);
    std::vector<int32_t> allowed, forbidden;
    for (int32_t t = 0; t < compiler.vocab_size(); ++t) (mask_allows(mask, t) ? allowed : forbidden).push_back(t);
    if (!forbidden.empty() && steer % 3 == 0) {
      const int32_t no = forbidden[steer % forbidden.size()];
      if (state->accept(no)) std::abort();
      std::vector<uint32_t> again(mask.size());
      state->allowed(again);
      if (again != mask) std::abort();  // a refused token changed the state
    }
    if (allowed.empty()) break;  // a grammar with no way forward here
    const int32_t yes = allowed[steer % allowed.size()];
    if (!state->accept(yes)) std::abort();
    steer = steer * 1103515245u + 12345u;
  }
  return 0;
}
