#pragma once
// Text <-> token ids for Llama-family vocabularies, giving the ids llama.cpp
// gives for the same GGUF:
//   - byte-level BPE (GPT-2 family: SmolLM, Llama 3, Qwen2): split with the
//     family's pre-tokenizer rules, map bytes to printable characters, merge
//     by rank;
//   - SentencePiece-style BPE (Llama 2, "llama" in GGUF): spaces become
//     U+2581 ("▁", one is put in front when add_space_prefix), merge the
//     highest-scoring pairs, characters outside the vocabulary fall back to
//     <0xNN> byte tokens.
// Special tokens (control, user-defined, unknown) are found in the raw text
// first, longest first, as llama.cpp does. Where they may be found is the
// caller's choice: everywhere (parse_special), nowhere but user-defined
// tokens, or only inside the trusted segments of a prompt (chat templates:
// markup yes, message content no).
//
// Thread-safety: immutable after construction; every const member may be
// called concurrently (the word cache is guarded by a mutex).

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/prompt_segment.hpp"
#include "tokenizer/vocab.hpp"

namespace actorlm {

class Tokenizer {
 public:
  // Throws std::invalid_argument naming the problem (empty vocabulary,
  // lengths that disagree, a byte_bpe vocabulary without merges).
  explicit Tokenizer(VocabData data);
  // Throw ModelError naming the file and what is wrong.
  static Tokenizer from_gguf(const GgufFile& file);
  static Tokenizer from_hf_json(const std::string& tokenizer_json_path);

  // add_bos: put BOS first (when the vocabulary has one); the model's own
  // preference is add_bos_by_default().
  // parse_special: text of control/unknown tokens (e.g. "<|im_start|>")
  // becomes that token; otherwise it is tokenized as plain text.
  // User-defined tokens are matched either way (as llama.cpp does).
  // Throws std::invalid_argument for text over 1 GiB.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // The concatenated text of segments, where control/unknown token text
  // becomes a special token only when the whole match lies inside segments
  // with parse_special (user-defined tokens: anywhere, as above).
  // Segments decide nothing else: the raw text between two special tokens
  // is split and merged as one stretch even where it crosses a segment
  // boundary, exactly as encode(concatenation, add_bos, true) would. So a
  // prompt whose untrusted segments hold no special-token text gives the
  // same ids as before segments existed. (Merging each segment on its own
  // would not: ChatML's "user\n" then content "\n\nHi" merges "\n\n\n"
  // differently when cut after the first "\n".)
  std::vector<int32_t> encode(std::span<const PromptSegment> segments, bool add_bos) const;

  // The bytes a token stands for (may be part of a UTF-8 character).
  // Control and unknown tokens give their text only with render_special;
  // unused tokens and ids out of range give "".
  std::string token_to_piece(int32_t id, bool render_special = true) const;
  std::string token_bytes(int32_t id, bool render_special = true) const { return token_to_piece(id, render_special); }
  // Concatenated pieces; not necessarily valid UTF-8 (see
  // IncrementalDetokenizer / sanitize_utf8 for text to show).
  std::string decode(std::span<const int32_t> ids, bool render_special = true) const;

  int32_t vocab_size() const { return static_cast<int32_t>(data_.tokens.size()); }
  std::optional<int32_t> bos_id() const { return data_.bos; }
  std::optional<int32_t> eos_id() const { return data_.eos; }
  bool add_bos_by_default() const { return data_.add_bos && data_.bos.has_value(); }
  // Tokens that end generation as llama.cpp counts them: EOS, end-of-turn
  // and end-of-message tokens by id or by their well-known texts
  // ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", ...). Sorted.
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_; }
  bool is_end_of_generation(int32_t id) const;
  bool is_control(int32_t id) const;
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token_text) const;
  // Throws std::out_of_range for an id outside the vocabulary.
  const std::string& token_text(int32_t id) const { return data_.tokens.at(static_cast<size_t>(id)); }
  const std::string& chat_template() const { return data_.chat_template; }
  const std::vector<std::string>& warnings() const { return data_.warnings; }
  VocabData::Kind kind() const { return data_.kind; }
  PreTokenizer pre_tokenizer() const { return data_.pre; }

 private:
  struct Fragment {
    size_t start = 0, len = 0;
    int32_t token = -1;  // >= 0: a special token; else raw text
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  void index_tokens();
  void find_end_of_generation();
  void spm_run(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;
  // Byte range [begin, end) of a text in which control tokens may match
  // (trusted segments, adjacent ones joined).
  struct TrustedRange {
    size_t begin = 0, end = 0;
  };
  // trusted == nullptr: control tokens match anywhere when parse_special,
  // nowhere otherwise. Else they match only inside one of *trusted (sorted,
  // disjoint) and parse_special is ignored.
  std::vector<Fragment> partition(std::string_view text, bool parse_special,
                                  const std::vector<TrustedRange>* trusted) const;
  std::vector<int32_t> encode_fragments(std::string_view text, const std::vector<Fragment>& frags, bool add_bos) const;
  void bpe_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void spm_fragment(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;
  std::optional<int32_t> pair_merge(int32_t left, int32_t right, int32_t* rank) const;

  VocabData data_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  // (left id << 32 | right id) -> {rank, merged id}
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> pair_rank_;
  std::vector<int32_t> specials_;        // matched in raw text, longest first
  bool special_first_byte_[256] = {};
  std::vector<int32_t> byte_token_;      // byte -> token id (byte image / <0xNN>), -1 if none
  std::vector<std::string> pieces_;      // token_to_piece with render_special
  std::vector<int32_t> eog_;
  // Behind a pointer so a Tokenizer stays movable.
  mutable std::unique_ptr<std::mutex> cache_mutex_ = std::make_unique<std::mutex>();
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> word_cache_;
};

}  // namespace actorlm
