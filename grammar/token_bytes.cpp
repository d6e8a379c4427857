#include "grammar/token_bytes.hpp"

namespace actorlm {

std::vector<std::string> token_bytes(const Tokenizer& tok, int32_t model_vocab) {
  std::vector<std::string> out(static_cast<size_t>(model_vocab));
  const int32_t n = std::min(model_vocab, tok.vocab_size());
  for (int32_t t = 0; t < n; ++t) {
    // Control tokens render as "" without render_special; user-defined ones
    // (which the text of an answer may well contain) keep their text.
    out[static_cast<size_t>(t)] = tok.token_to_piece(t, /*render_special=*/false);
  }
  return out;
}

std::shared_ptr<ConstraintCompiler> make_constraint_compiler(const Tokenizer& tok, int32_t model_vocab, int threads) {
  std::vector<int32_t> stops;
  for (int32_t id : tok.end_of_generation_ids()) {
    if (id < model_vocab) stops.push_back(id);
  }
  return std::make_shared<ConstraintCompiler>(token_bytes(tok, model_vocab), std::move(stops), threads);
}

}  // namespace actorlm
