#pragma once
// The vocabulary as a constraint engine sees it: each token's bytes.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/constraint.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actorlm {

// One entry per logit (model_vocab of them, which may exceed the
// tokenizer's): the token's bytes, or "" for control, unused and padding
// tokens, which no constraint may produce.
std::vector<std::string> token_bytes(const Tokenizer& tok, int32_t model_vocab);

// A compiler over `tok`, whose end-of-generation tokens end a constrained
// output.
std::shared_ptr<ConstraintCompiler> make_constraint_compiler(const Tokenizer& tok, int32_t model_vocab, int threads);

}  // namespace actorlm
