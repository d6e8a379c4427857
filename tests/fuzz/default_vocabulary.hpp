#pragma once
// The default model's tokenizer, loaded once per fuzz process; a target
// that cannot load it aborts with a message (the fuzzer then reports it).

#include <cstdio>
#include <cstdlib>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actorlm::fuzz {

inline const Tokenizer& default_tokenizer(const char* target) {
  static const Tokenizer t = [target] {
    try {
      return Tokenizer::from_gguf(GgufFile::open(default_model_path()));
    } catch (const ModelError& e) {
      std::fprintf(stderr, "%s: cannot load the vocabulary: %s\n", target, e.what());
      std::abort();
    }
  }();
  return t;
}

}  // namespace actorlm::fuzz
