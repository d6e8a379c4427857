#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "model/gguf_file.hpp"
#include "tokenizer/symbol_merger.hpp"
#include "tokenizer/unicode.hpp"

namespace actorlm {
namespace {

// The word cache holds at most this many pieces, each at most this long (so
// it stays a few MB: long pieces are rare and merging them dominates anyway).
constexpr size_t max_cached_words = 1 << 16;
constexpr size_t max_cached_word_bytes = 64;
const std::string spm_space = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Texts llama.cpp treats as end-of-turn / end-of-generation tokens, and the
// fill-in-the-middle tokens it also stops on (pad, repo, file separator).
const char* const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "[e~[",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", "<|file_sep|>"};
// Fill-in-the-middle markers that are control tokens whatever the file says.
const char* const fim_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|fim_suffix|>",
                                 "<fim-suffix>",   "<fim_suffix>", "<SUF>",        "<|fim_middle|>", "<fim-middle>",
                                 "<fim_middle>",   "<MID>"};

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, from.size(), from) == 0) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xNN>" -> NN, or -1.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  try {
    return Tokenizer(vocab_from_gguf(file));
  } catch (const std::invalid_argument& e) {
    throw ModelError(file.path() + ": " + e.what());
  }
}

Tokenizer Tokenizer::from_hf_json(const std::string& path) {
  try {
    return Tokenizer(vocab_from_hf_json(path));
  } catch (const std::invalid_argument& e) {
    throw ModelError(path + ": " + e.what());
  }
}

Tokenizer::Tokenizer(VocabData data) : data_(std::move(data)) {
  const size_t n = data_.tokens.size();
  if (n == 0) throw std::invalid_argument("tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) throw std::invalid_argument("tokenizer: more than 2^31 tokens");
  if (data_.types.empty()) data_.types.assign(n, TokenType::normal);
  if (data_.types.size() != n) throw std::invalid_argument("tokenizer: token types and tokens differ in length");
  if (data_.kind == VocabData::Kind::byte_bpe && data_.merges.empty()) {
    throw std::invalid_argument("tokenizer: a byte-level BPE vocabulary needs merges");
  }
  if (data_.kind == VocabData::Kind::spm && data_.merges.empty() && data_.scores.size() != n) {
    throw std::invalid_argument("tokenizer: a SentencePiece vocabulary needs one score per token (or merges)");
  }
  auto check_id = [&](std::optional<int32_t>& id, const char* what) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      data_.warnings.push_back(std::string(what) + " id " + std::to_string(*id) + " is outside the vocabulary; ignored");
      id.reset();
    }
  };
  check_id(data_.bos, "BOS");
  check_id(data_.eos, "EOS");
  check_id(data_.unk, "UNK");
  check_id(data_.eot, "EOT");
  check_id(data_.eom, "EOM");
  index_tokens();
  find_end_of_generation();

  for (size_t i = 0; i < n; ++i) {
    TokenType t = data_.types[i];
    if ((t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown) && !data_.tokens[i].empty()) {
      specials_.push_back(static_cast<int32_t>(i));
      special_first_byte_[static_cast<uint8_t>(data_.tokens[i][0])] = true;
    }
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return data_.tokens[static_cast<size_t>(a)].size() > data_.tokens[static_cast<size_t>(b)].size();
  });

  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = data_.tokens[i];
    switch (data_.types[i]) {
      case TokenType::control:
      case TokenType::unknown:
      case TokenType::user_defined: pieces_[i] = t; break;
      case TokenType::unused:
      case TokenType::undefined: break;
      case TokenType::byte:
        if (int b = byte_token_value(t); b >= 0) {
          pieces_[i] = std::string(1, static_cast<char>(b));
          break;
        }
        [[fallthrough]];
      case TokenType::normal:
        if (data_.kind == VocabData::Kind::spm) {
          pieces_[i] = replace_all(t, spm_space, " ");
        } else {
          for (char32_t cp : unicode::decode_utf8(t)) {
            int b = unicode::char_to_byte(cp);
            if (b >= 0) {
              pieces_[i].push_back(static_cast<char>(b));
            } else {
              unicode::append_utf8(pieces_[i], cp);  // not a byte image: keep the character
            }
          }
        }
        break;
    }
  }
}

void Tokenizer::index_tokens() {
  const size_t n = data_.tokens.size();
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_to_id_[data_.tokens[i]] = static_cast<int32_t>(i);  // last wins, as llama.cpp

  byte_token_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    std::optional<int32_t> id;
    if (data_.kind == VocabData::Kind::byte_bpe) {
      id = token_id(unicode::encode_utf8(unicode::byte_to_char(static_cast<uint8_t>(b))));
    } else {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      id = token_id(name);
      if (!id) id = token_id(std::string(1, static_cast<char>(b)));
    }
    if (id) byte_token_[static_cast<size_t>(b)] = *id;
  }

  size_t unusable = 0;
  pair_rank_.reserve(data_.merges.size());
  for (size_t r = 0; r < data_.merges.size(); ++r) {
    const auto& [left, right] = data_.merges[r];
    auto l = token_id(left), rt = token_id(right);
    if (!l || !rt) {
      ++unusable;
      continue;
    }
    auto merged = token_id(left + right);
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(*l)) << 32) | static_cast<uint32_t>(*rt);
    pair_rank_.emplace(key, std::make_pair(static_cast<int32_t>(r), merged.value_or(-1)));  // first rank wins
  }
  if (unusable > 0) {
    data_.warnings.push_back(std::to_string(unusable) + " merges name tokens outside the vocabulary; ignored");
  }
}

void Tokenizer::find_end_of_generation() {
  auto mark = [&](const char* text, bool end_of_generation) {
    auto id = token_id(text);
    if (!id) return;
    data_.types[static_cast<size_t>(*id)] = TokenType::control;
    if (end_of_generation) eog_.push_back(*id);
  };
  // "</s>" is an ordinary token in vocabularies that end turns with
  // "<|tool_response>" or "<|plamo:eos|>" (llama.cpp makes the same exception).
  const bool s_is_text = token_id("<|tool_response>") || token_id("<|plamo:eos|>");
  for (const char* t : eog_texts) {
    if (!(s_is_text && std::string_view(t) == "</s>")) mark(t, true);
  }
  for (const char* t : fim_texts) mark(t, false);
  for (const auto& id : {data_.eos, data_.eot, data_.eom}) {
    if (id) eog_.push_back(*id);
  }
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
}

bool Tokenizer::is_end_of_generation(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return TokenType::undefined;
  return data_.types[static_cast<size_t>(id)];
}

bool Tokenizer::is_control(int32_t id) const { return token_type(id) == TokenType::control; }

std::optional<int32_t> Tokenizer::token_id(std::string_view token_text) const {
  auto it = token_to_id_.find(token_text);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  TokenType t = token_type(id);
  if (t == TokenType::undefined && (id < 0 || id >= vocab_size())) return {};
  if (!render_special && (t == TokenType::control || t == TokenType::unknown)) return {};
  return pieces_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    TokenType t = token_type(id);
    if (t == TokenType::undefined && (id < 0 || id >= vocab_size())) continue;
    if (!render_special && (t == TokenType::control || t == TokenType::unknown)) continue;
    out += pieces_[static_cast<size_t>(id)];
  }
  return out;
}

std::optional<int32_t> Tokenizer::pair_merge(int32_t left, int32_t right, int32_t* rank) const {
  if (left < 0 || right < 0) return std::nullopt;
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  auto it = pair_rank_.find(key);
  if (it == pair_rank_.end()) return std::nullopt;
  *rank = it->second.first;
  return it->second.second;
}

// One pre-tokenized piece of byte-level BPE: a symbol per byte, merged by
// rank. Results are cached per piece (words repeat a lot in real text).
void Tokenizer::bpe_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const bool cacheable = piece.size() <= max_cached_word_bytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    if (auto it = word_cache_.find(piece); it != word_cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  std::optional<int32_t> whole;
  if (data_.ignore_merges) {
    std::string mapped;
    for (char c : piece) unicode::append_utf8(mapped, unicode::byte_to_char(static_cast<uint8_t>(c)));
    whole = token_id(mapped);
  }
  if (whole) {
    ids.push_back(*whole);
  } else {
    std::vector<MergeSymbol> syms(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) {
      syms[i] = {static_cast<uint32_t>(i), 1, byte_token_[static_cast<uint8_t>(piece[i])], static_cast<int32_t>(i) - 1,
                 i + 1 < piece.size() ? static_cast<int32_t>(i) + 1 : -1};
    }
    merge_symbols(syms, [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<MergeCandidate> {
      int32_t rank = 0;
      auto merged = pair_merge(l.id, r.id, &rank);
      if (!merged) return std::nullopt;
      return MergeCandidate{static_cast<double>(rank), *merged};
    });
    for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
      const MergeSymbol& s = syms[static_cast<size_t>(i)];
      if (s.id >= 0) {
        ids.push_back(s.id);
        continue;
      }
      for (uint32_t k = s.start; k < s.start + s.len; ++k) {  // not a token: byte by byte
        int32_t b = byte_token_[static_cast<uint8_t>(piece[k])];
        if (b >= 0) {
          ids.push_back(b);
        } else if (data_.unk) {
          ids.push_back(*data_.unk);
        }
      }
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (!cacheable) return;
  std::lock_guard<std::mutex> lock(*cache_mutex_);
  if (word_cache_.size() >= max_cached_words) word_cache_.clear();
  word_cache_.emplace(std::string(piece), std::move(ids));
}

// SentencePiece BPE over one stretch of raw text: characters, merged while
// some adjacent pair spells a token (best score first, or best merge rank
// for tokenizer.json vocabularies); leftovers become <0xNN> byte tokens.
void Tokenizer::spm_fragment(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const {
  if (data_.split_newlines) {
    // Each run of newlines, and each stretch between them, merges alone.
    size_t b = 0;
    while (b < text.size()) {
      const bool nl = text[b] == '\n';
      size_t e = b;
      while (e < text.size() && (text[e] == '\n') == nl) ++e;
      spm_run(text.substr(b, e - b), space_prefix && b == 0, out);
      b = e;
    }
    return;
  }
  spm_run(text, space_prefix, out);
}

void Tokenizer::spm_run(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const {
  std::string s = (space_prefix ? spm_space : std::string()) + replace_all(text, " ", spm_space);
  std::vector<MergeSymbol> syms = utf8_symbols(s.data(), s.size());
  const std::string_view sv(s);
  for (MergeSymbol& sym : syms) sym.id = token_id(sv.substr(sym.start, sym.len)).value_or(-1);
  const bool by_rank = !data_.merges.empty();
  merge_symbols(syms, [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<MergeCandidate> {
    if (by_rank) {
      int32_t rank = 0;
      auto merged = pair_merge(l.id, r.id, &rank);
      if (!merged || *merged < 0) return std::nullopt;
      return MergeCandidate{static_cast<double>(rank), *merged};
    }
    auto id = token_id(sv.substr(l.start, l.len + r.len));
    if (!id) return std::nullopt;
    return MergeCandidate{-static_cast<double>(data_.scores[static_cast<size_t>(*id)]), *id};
  });
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const MergeSymbol& sym = syms[static_cast<size_t>(i)];
    if (sym.id >= 0) {
      out.push_back(sym.id);
      continue;
    }
    for (uint32_t k = sym.start; k < sym.start + sym.len; ++k) {
      int32_t b = byte_token_[static_cast<uint8_t>(s[k])];
      if (b >= 0) {
        out.push_back(b);
      } else if (data_.unk) {
        out.push_back(*data_.unk);
      }
    }
  }
}

}  // namespace actorlm
