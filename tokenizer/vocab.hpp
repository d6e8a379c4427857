#pragma once
// The raw material of a tokenizer: token strings, their types, merge rules
// and the special ids, as read from GGUF metadata (tokenizer.ggml.*) or from
// a Hugging Face tokenizer.json (+ tokenizer_config.json beside it).
// Plain data; Tokenizer validates it.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/pre_tokenizer.hpp"

namespace actorlm {

class GgufFile;

// The GGUF token types (tokenizer.ggml.token_type), numbered as in GGUF.
enum class TokenType : int32_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct VocabData {
  // byte_bpe: GPT-2 style byte-level BPE (tokenizer.ggml.model = "gpt2").
  // spm: SentencePiece-style BPE over characters with "▁" for spaces and
  //      <0xNN> byte fallback (tokenizer.ggml.model = "llama"; also "gemma4",
  //      which merges by rank, inside newline and non-newline runs).
  enum class Kind { byte_bpe, spm } kind = Kind::byte_bpe;
  PreTokenizer pre = PreTokenizer::gpt2;       // byte_bpe only
  std::vector<std::string> tokens;             // id -> token text (byte images for byte_bpe)
  std::vector<TokenType> types;                // empty = all normal
  std::vector<float> scores;                   // spm without merges: higher merges first
  // Merge rules in rank order (first = applied first). byte_bpe always has
  // them; spm has them only when read from a tokenizer.json (then they, not
  // scores, decide the merge order).
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<int32_t> bos, eos, unk, eot, eom;
  bool add_bos = false;
  bool add_space_prefix = false;  // spm: "▁" before the text and after each special token
  bool ignore_merges = false;     // byte_bpe (Llama 3): a piece that is a whole token is taken as is
  bool split_newlines = false;    // spm (Gemma 4): runs of "\n" and of anything else merge apart
  std::string chat_template;      // Jinja source, if the model has one
  std::vector<std::string> warnings;
};

// Throws ModelError naming the file and the missing/bad key.
VocabData vocab_from_gguf(const GgufFile& file);

// path: a tokenizer.json. Reads tokenizer_config.json from the same folder
// when present (bos/eos tokens, add_bos_token, chat_template). Throws
// ModelError naming the file and what is wrong.
VocabData vocab_from_hf_json(const std::string& path);

// Splits a merges entry "left right" at its first space after position 0.
// Returns false when there is no such space.
bool split_merge(const std::string& merge, std::pair<std::string, std::string>* out);

}  // namespace actorlm
