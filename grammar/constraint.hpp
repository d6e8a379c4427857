#pragma once
// Constrained decoding (structured output): a request may ask that its output
// match a JSON schema, any JSON object, a regular expression or an EBNF
// grammar. Each step the request's ConstraintState says which tokens may come
// next (a bitmask the sampler applies: every other token's logit becomes
// -inf) and then accepts the token sampled.
//
// The engine is xgrammar's C++ core (the one SGLang and vLLM use): grammars
// are compiled against the vocabulary once and cached by their text, and the
// per-step mask comes from its precomputed per-position token sets rather
// than from walking the vocabulary. Its headers stay out of this one.
//
// Thread-safety: ConstraintCompiler may be used from many threads; a
// ConstraintState belongs to one request, used by one thread at a time.

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorlm {

enum class ConstraintKind : uint8_t { none = 0, json_object, json_schema, regex, ebnf };

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::none;
  std::string text;  // the schema (JSON), the regex or the grammar; empty for json_object
  // json_schema only: literal text the output has before and after the
  // JSON (a tool call's tags).
  std::string prefix = {}, suffix = {};

  bool active() const { return kind != ConstraintKind::none; }
};

// What a schema, regex or grammar that cannot be compiled throws: the
// engine's own explanation, cut to a few hundred bytes.
class ConstraintError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// 32-bit words in a mask over `vocab` tokens: bit (t % 32) of word t / 32.
inline size_t mask_words(int32_t vocab) { return (static_cast<size_t>(vocab) + 31) / 32; }
inline bool mask_allows(std::span<const uint32_t> mask, int32_t token) {
  return (mask[static_cast<size_t>(token) / 32] >> (token % 32) & 1u) != 0;
}

class CompiledConstraint;
class ConstraintState;

class ConstraintCompiler {
 public:
  // token_bytes[t]: the bytes token t stands for ("" for control and unused
  // tokens, which a constraint never allows); stop_ids: the tokens that end
  // generation, allowed once the constraint is complete.
  ConstraintCompiler(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids, int threads);
  ~ConstraintCompiler();
  ConstraintCompiler(const ConstraintCompiler&) = delete;
  ConstraintCompiler& operator=(const ConstraintCompiler&) = delete;

  // A fresh state at the start of `spec` (compiled once per distinct spec).
  // Throws ConstraintError for a spec that does not compile.
  std::unique_ptr<ConstraintState> start(const ConstraintSpec& spec);
  // Compiles `spec` into the cache without starting a state, so that a
  // later start() is quick: the engine compiles before a request reaches
  // the scheduler, whose thread must not stall running requests for a new
  // schema. Throws ConstraintError as start() does.
  void prepare(const ConstraintSpec& spec);
  int32_t vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class ConstraintState {
 public:
  ~ConstraintState();
  ConstraintState(const ConstraintState&) = delete;
  ConstraintState& operator=(const ConstraintState&) = delete;

  // The tokens allowed next into `mask` (mask_words(vocab) words).
  void allowed(std::span<uint32_t> mask);
  // Advances past `token`; false when the constraint does not allow it
  // (the state is then unchanged).
  bool accept(int32_t token);
  // Undoes the last `tokens` accepts (speculative decoding walks drafts
  // to mask each verified position, then steps back). At most as many as
  // were accepted.
  void rollback(int tokens);
  // A stop token was accepted, or nothing but one could follow: the output
  // is complete.
  bool complete() const;

 private:
  friend class ConstraintCompiler;
  struct Impl;
  explicit ConstraintState(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm
