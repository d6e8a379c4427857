// VocabData from GGUF metadata, with the defaults llama.cpp applies when a
// key is absent (so the same file tokenizes the same way in both).

#include <cmath>

#include "model/gguf_file.hpp"
#include "tokenizer/vocab.hpp"

namespace actorlm {
namespace {

// Pre-tokenizer names for which llama.cpp takes whole-token pieces without
// merging and adds BOS by default (the Llama 3 tokenizer family).
bool is_llama3_family(const std::string& pre) {
  return pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3";
}

std::optional<int32_t> special_id(const GgufFile& f, const char* key, int64_t n_tokens, VocabData& d) {
  auto v = f.get_int(key);
  if (!v) return std::nullopt;
  if (*v < 0 || *v >= n_tokens) {
    d.warnings.push_back(std::string(key) + " = " + std::to_string(*v) + " is outside the vocabulary of " +
                         std::to_string(n_tokens) + "; ignored");
    return std::nullopt;
  }
  return static_cast<int32_t>(*v);
}

}  // namespace

bool split_merge(const std::string& merge, std::pair<std::string, std::string>* out) {
  size_t at = merge.find(' ', 1);
  if (at == std::string::npos) return false;
  out->first = merge.substr(0, at);
  out->second = merge.substr(at + 1);
  return true;
}

VocabData vocab_from_gguf(const GgufFile& f) {
  VocabData d;
  const std::string model = f.get_string("tokenizer.ggml.model").value_or("");
  if (model == "gpt2") {
    d.kind = VocabData::Kind::byte_bpe;
  } else if (model == "llama" || model == "gemma4") {
    d.kind = VocabData::Kind::spm;
  } else {
    throw ModelError(f.path() + ": tokenizer.ggml.model is '" + model +
                     "'; supported are 'gpt2', 'llama' and 'gemma4' (WordPiece 'bert' and Unigram 't5', the "
                     "embedding models' tokenizers, are not)");
  }
  // Gemma 4: SentencePiece-style symbols (U+2581 for spaces, raw UTF-8, byte
  // fallback) merged by the file's merge ranks, not by scores.
  const bool gemma4 = model == "gemma4";

  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) throw ModelError(f.path() + ": tokenizer.ggml.tokens is missing or empty");
  d.tokens = std::move(*tokens);
  const auto n = static_cast<int64_t>(d.tokens.size());
  if (n > INT32_MAX) throw ModelError(f.path() + ": tokenizer.ggml.tokens has more than 2^31 entries");

  if (auto types = f.get_int_array("tokenizer.ggml.token_type")) {
    if (static_cast<int64_t>(types->size()) != n) {
      throw ModelError(f.path() + ": tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                       " entries for " + std::to_string(n) + " tokens");
    }
    for (int64_t t : *types) {
      d.types.push_back(t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::undefined);
    }
  }
  if (auto scores = f.get_float_array("tokenizer.ggml.scores")) {
    if (static_cast<int64_t>(scores->size()) != n) {
      throw ModelError(f.path() + ": tokenizer.ggml.scores has " + std::to_string(scores->size()) +
                       " entries for " + std::to_string(n) + " tokens");
    }
    for (double s : *scores) d.scores.push_back(std::isfinite(s) ? static_cast<float>(s) : -INFINITY);
  }
  if (auto merges = f.get_string_array("tokenizer.ggml.merges")) {
    d.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      std::pair<std::string, std::string> m;
      if (!split_merge((*merges)[i], &m)) {
        throw ModelError(f.path() + ": tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + (*merges)[i] +
                         "' is not 'left right'");
      }
      d.merges.push_back(std::move(m));
    }
  }
  if (d.kind == VocabData::Kind::byte_bpe && d.merges.empty()) {
    throw ModelError(f.path() + ": a gpt2 (BPE) vocabulary needs tokenizer.ggml.merges");
  }
  if (gemma4 && d.merges.empty()) throw ModelError(f.path() + ": a gemma4 vocabulary needs tokenizer.ggml.merges");
  if (d.kind == VocabData::Kind::spm && !gemma4) {
    if (d.scores.empty()) throw ModelError(f.path() + ": a llama (SentencePiece) vocabulary needs tokenizer.ggml.scores");
    d.merges.clear();  // SentencePiece merges by score
  }

  const std::string pre = f.get_string("tokenizer.ggml.pre").value_or("default");
  if (d.kind == VocabData::Kind::byte_bpe) {
    bool known = true;
    d.pre = pre_tokenizer_from_name(pre, &known);
    if (!known) d.warnings.push_back("unknown tokenizer.ggml.pre '" + pre + "'; using the GPT-2 split rules");
    if (is_llama3_family(pre)) {
      d.ignore_merges = true;
      d.add_bos = true;
    }
  } else if (gemma4) {
    d.split_newlines = true;  // special ids and add_bos come from the file's keys below
  } else {
    d.add_space_prefix = true;
    d.add_bos = true;
    d.bos = 1 < n ? std::optional<int32_t>(1) : std::nullopt;
    d.eos = 2 < n ? std::optional<int32_t>(2) : std::nullopt;
    d.unk = 0;
  }
  if (auto v = f.get_bool("tokenizer.ggml.add_bos_token")) d.add_bos = *v;
  if (auto v = f.get_bool("tokenizer.ggml.add_space_prefix")) d.add_space_prefix = *v;
  if (auto v = special_id(f, "tokenizer.ggml.bos_token_id", n, d)) d.bos = v;
  if (auto v = special_id(f, "tokenizer.ggml.eos_token_id", n, d)) d.eos = v;
  if (auto v = special_id(f, "tokenizer.ggml.unknown_token_id", n, d)) d.unk = v;
  if (auto v = special_id(f, "tokenizer.ggml.eot_token_id", n, d)) d.eot = v;
  if (auto v = special_id(f, "tokenizer.ggml.eom_token_id", n, d)) d.eom = v;
  d.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  return d;
}

}  // namespace actorlm
