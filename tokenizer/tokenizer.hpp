#pragma once
// Text <-> token ids for Llama-family vocabularies:
//   - byte-level BPE (GPT-2 family: SmolLM, Llama 3, Qwen2): pre-tokenize,
//     map bytes to printable characters, merge by rank;
//   - SentencePiece-style BPE (Llama 2, "llama" in GGUF): spaces become U+2581,
//     merge the highest-scoring pairs, unknown characters fall back to
//     <0xNN> byte tokens.
// Loaded from GGUF metadata (tokenizer.ggml.*) or a Hugging Face
// tokenizer.json. Immutable after construction; encode/decode are const and
// thread-safe (the word cache is guarded).

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.hpp"

namespace actorlm {

class GgufFile;

enum class TokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct VocabData {
  enum class Kind { byte_bpe, spm } kind = Kind::byte_bpe;
  PreTokenizer pre = PreTokenizer::gpt2;
  std::vector<std::string> tokens;
  std::vector<TokenType> types;       // empty = all normal
  std::vector<float> scores;          // spm
  std::vector<std::string> merges;    // byte_bpe: "left right", in rank order
  std::optional<int32_t> bos, eos, unk;
  bool add_bos = false;
  bool add_space_prefix = false;      // spm
  std::string chat_template;          // tokenizer.chat_template, if present
  std::vector<std::string> warnings;  // e.g. an unknown pre-tokenizer name
};

class Tokenizer {
 public:
  explicit Tokenizer(VocabData data);
  static Tokenizer from_gguf(const GgufFile& file);
  // A Hugging Face tokenizer.json (byte-level BPE models).
  static Tokenizer from_hf_json(const std::string& path);

  // parse_special: control-token text (e.g. "<|im_start|>") becomes that
  // token; otherwise it is tokenized as plain text. User-defined tokens are
  // always matched. add_bos prepends BOS when the vocabulary has one.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // Bytes of the tokens (not necessarily valid UTF-8 at token boundaries).
  // render_special: include the text of control tokens.
  std::string decode(std::span<const int32_t> ids, bool render_special = true) const;
  // Raw bytes of one token; empty for an id out of range.
  std::string token_bytes(int32_t id, bool render_special = true) const;

  int32_t vocab_size() const { return static_cast<int32_t>(data_.tokens.size()); }
  std::optional<int32_t> bos_id() const { return data_.bos; }
  std::optional<int32_t> eos_id() const { return data_.eos; }
  bool add_bos_by_default() const { return data_.add_bos; }
  bool is_control(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token_text) const;
  const std::string& token_text(int32_t id) const { return data_.tokens.at(static_cast<size_t>(id)); }
  const std::string& chat_template() const { return data_.chat_template; }
  const std::vector<std::string>& warnings() const { return data_.warnings; }
  VocabData::Kind kind() const { return data_.kind; }

 private:
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  void spm_text(std::string_view text, std::vector<int32_t>& out) const;

  VocabData data_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  std::vector<int32_t> specials_;                        // matched in raw text, longest first
  std::vector<int32_t> byte_tokens_;                     // spm: <0xNN> ids, -1 if missing
  // Behind a pointer so a Tokenizer can be moved.
  mutable std::unique_ptr<std::mutex> cache_mutex_ = std::make_unique<std::mutex>();
  mutable std::unordered_map<std::string, std::vector<int32_t>> word_cache_;
};

}  // namespace actorlm
