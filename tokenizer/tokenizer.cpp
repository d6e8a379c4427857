#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/gguf_file.hpp"
#include "tokenizer/unicode.hpp"

namespace actorlm {
namespace {

constexpr size_t max_cached_words = 1 << 16;
const std::string spm_space = "\xE2\x96\x81";  // U+2581

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s.substr(i, from.size()) == from) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(VocabData data) : data_(std::move(data)) {
  if (data_.tokens.empty()) throw std::invalid_argument("tokenizer: empty vocabulary");
  if (!data_.types.empty() && data_.types.size() != data_.tokens.size()) {
    throw std::invalid_argument("tokenizer: token types and tokens differ in length");
  }
  for (size_t i = 0; i < data_.tokens.size(); ++i) token_to_id_.emplace(data_.tokens[i], static_cast<int32_t>(i));
  for (size_t r = 0; r < data_.merges.size(); ++r) merge_rank_.emplace(data_.merges[r], static_cast<int32_t>(r));
  for (size_t i = 0; i < data_.types.size(); ++i) {
    if (data_.types[i] == TokenType::control || data_.types[i] == TokenType::user_defined) {
      if (!data_.tokens[i].empty()) specials_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return data_.tokens[static_cast<size_t>(a)].size() > data_.tokens[static_cast<size_t>(b)].size();
  });
  if (data_.kind == VocabData::Kind::spm) {
    byte_tokens_.assign(256, -1);
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (auto it = token_to_id_.find(name); it != token_to_id_.end()) byte_tokens_[static_cast<size_t>(b)] = it->second;
    }
  }
  auto check_id = [&](std::optional<int32_t>& id, const char* what) {
    if (id && (*id < 0 || *id >= vocab_size())) {
      data_.warnings.push_back(std::string(what) + " id " + std::to_string(*id) + " is outside the vocabulary; ignored");
      id.reset();
    }
  };
  check_id(data_.bos, "BOS");
  check_id(data_.eos, "EOS");
  check_id(data_.unk, "UNK");
}

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  VocabData d;
  std::string model = f.get_string("tokenizer.ggml.model").value_or("");
  if (model == "gpt2") {
    d.kind = VocabData::Kind::byte_bpe;
  } else if (model == "llama") {
    d.kind = VocabData::Kind::spm;
  } else {
    throw ModelError(f.path() + ": unsupported tokenizer model '" + model + "' (gpt2 and llama are)");
  }
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) throw ModelError(f.path() + ": missing tokenizer.ggml.tokens");
  d.tokens = std::move(*tokens);
  if (auto types = f.get_int_array("tokenizer.ggml.token_type")) {
    for (int64_t t : *types) d.types.push_back(static_cast<TokenType>(t));
  }
  if (auto scores = f.get_float_array("tokenizer.ggml.scores")) {
    for (double s : *scores) d.scores.push_back(static_cast<float>(s));
  }
  if (auto merges = f.get_string_array("tokenizer.ggml.merges")) d.merges = std::move(*merges);
  if (d.kind == VocabData::Kind::byte_bpe && d.merges.empty()) throw ModelError(f.path() + ": BPE vocabulary without merges");
  if (d.kind == VocabData::Kind::spm && d.scores.size() != d.tokens.size()) throw ModelError(f.path() + ": SentencePiece vocabulary without scores");
  bool known = true;
  std::string pre = f.get_string("tokenizer.ggml.pre").value_or("default");
  d.pre = pre_tokenizer_from_name(pre, &known);
  if (!known) d.warnings.push_back("unknown pre-tokenizer '" + pre + "'; using GPT-2 rules");
  if (auto v = f.get_int("tokenizer.ggml.bos_token_id")) d.bos = static_cast<int32_t>(*v);
  if (auto v = f.get_int("tokenizer.ggml.eos_token_id")) d.eos = static_cast<int32_t>(*v);
  if (auto v = f.get_int("tokenizer.ggml.unknown_token_id")) d.unk = static_cast<int32_t>(*v);
  d.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(d.kind == VocabData::Kind::spm);
  d.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(d.kind == VocabData::Kind::spm);
  d.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  if (d.types.size() != d.tokens.size()) d.types.assign(d.tokens.size(), TokenType::normal);
  return Tokenizer(std::move(d));
}

Tokenizer Tokenizer::from_hf_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ModelError(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    const auto& m = j.at("model");
    if (m.value("type", "") != "BPE") throw ModelError("only BPE tokenizer.json models are supported");
    VocabData d;
    d.kind = VocabData::Kind::byte_bpe;
    std::vector<std::pair<int32_t, std::string>> vocab;
    for (const auto& [tok, id] : m.at("vocab").items()) vocab.emplace_back(id.get<int32_t>(), tok);
    int32_t n = 0;
    for (const auto& [id, tok] : vocab) n = std::max(n, id + 1);
    for (const auto& t : j.value("added_tokens", nlohmann::json::array())) n = std::max(n, t.at("id").get<int32_t>() + 1);
    d.tokens.assign(static_cast<size_t>(n), "");
    d.types.assign(static_cast<size_t>(n), TokenType::normal);
    for (auto& [id, tok] : vocab) d.tokens[static_cast<size_t>(id)] = tok;
    for (const auto& t : j.value("added_tokens", nlohmann::json::array())) {
      auto id = static_cast<size_t>(t.at("id").get<int32_t>());
      d.tokens[id] = t.at("content").get<std::string>();
      d.types[id] = t.value("special", false) ? TokenType::control : TokenType::user_defined;
    }
    for (const auto& mg : m.at("merges")) {
      d.merges.push_back(mg.is_string() ? mg.get<std::string>() : mg.at(0).get<std::string>() + " " + mg.at(1).get<std::string>());
    }
    // The pre-tokenizer regex tells the family apart.
    std::string pre = j.value("pre_tokenizer", nlohmann::json()).dump();
    if (pre.find("\\\\p{N}{1,3}") != std::string::npos) {
      d.pre = PreTokenizer::llama3;
    } else if (pre.find("Digits") != std::string::npos && pre.find("individual_digits\":true") != std::string::npos) {
      d.pre = PreTokenizer::smollm;
    } else if (pre.find("[\\\\r\\\\n\\\\p{L}\\\\p{N}]") != std::string::npos) {
      d.pre = PreTokenizer::qwen2;
    }
    return Tokenizer(std::move(d));
  } catch (const ModelError& e) {
    throw ModelError(path + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(path + ": " + e.what());
  }
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < data_.types.size() && data_.types[static_cast<size_t>(id)] == TokenType::control;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token_text) const {
  auto it = token_to_id_.find(std::string(token_text));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && data_.bos) out.push_back(*data_.bos);
  // Partition the text at special tokens (longest first at each position);
  // plain stretches in between are tokenized as text.
  size_t plain_start = 0, i = 0;
  while (i < text.size()) {
    int32_t hit = -1;
    for (int32_t id : specials_) {
      if (!parse_special && data_.types[static_cast<size_t>(id)] == TokenType::control) continue;
      const std::string& s = data_.tokens[static_cast<size_t>(id)];
      if (text.compare(i, s.size(), s) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (plain_start < i) encode_text(text.substr(plain_start, i - plain_start), out);
    out.push_back(hit);
    i += data_.tokens[static_cast<size_t>(hit)].size();
    plain_start = i;
  }
  if (plain_start < text.size()) encode_text(text.substr(plain_start), out);
  return out;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (data_.kind == VocabData::Kind::spm) {
    spm_text(text, out);
    return;
  }
  for (std::string_view piece : pre_tokenize(data_.pre, text)) {
    std::string mapped;
    for (char c : piece) unicode::append_utf8(mapped, unicode::byte_to_char(static_cast<uint8_t>(c)));
    bpe_word(mapped, out);
  }
}

// Merges adjacent symbols, always the pair with the lowest merge rank first
// (leftmost on ties), until no pair has a rank.
void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(*cache_mutex_);
    if (auto it = word_cache_.find(key); it != word_cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<size_t> offsets = unicode::utf8_offsets(word);
  std::vector<std::string> sym;
  for (size_t k = 0; k + 1 < offsets.size(); ++k) sym.emplace_back(word.substr(offsets[k], offsets[k + 1] - offsets[k]));
  std::string pair;
  while (sym.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    size_t best = 0;
    for (size_t k = 0; k + 1 < sym.size(); ++k) {
      pair.assign(sym[k]).append(" ").append(sym[k + 1]);
      auto it = merge_rank_.find(pair);
      if (it != merge_rank_.end() && it->second < best_rank) {
        best_rank = it->second;
        best = k;
      }
    }
    if (best_rank == std::numeric_limits<int32_t>::max()) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<ptrdiff_t>(best) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& s : sym) {
    if (auto it = token_to_id_.find(s); it != token_to_id_.end()) {
      ids.push_back(it->second);
      continue;
    }
    // Not in the vocabulary as a whole: one token per byte character.
    std::vector<size_t> o = unicode::utf8_offsets(s);
    for (size_t k = 0; k + 1 < o.size(); ++k) {
      auto it = token_to_id_.find(s.substr(o[k], o[k + 1] - o[k]));
      if (it != token_to_id_.end()) {
        ids.push_back(it->second);
      } else if (data_.unk) {
        ids.push_back(*data_.unk);
      }
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(*cache_mutex_);
  if (word_cache_.size() >= max_cached_words) word_cache_.clear();
  word_cache_.emplace(std::move(key), std::move(ids));
}

// SentencePiece BPE: start from characters, repeatedly merge the adjacent
// pair whose concatenation is the highest-scoring vocabulary entry (leftmost
// on ties); leftovers not in the vocabulary become <0xNN> byte tokens.
void Tokenizer::spm_text(std::string_view text, std::vector<int32_t>& out) const {
  std::string s = replace_all(text, " ", spm_space);
  if (data_.add_space_prefix && !s.empty()) s = spm_space + s;
  std::vector<size_t> offsets = unicode::utf8_offsets(s);
  std::vector<std::string> sym;
  for (size_t k = 0; k + 1 < offsets.size(); ++k) sym.emplace_back(s.substr(offsets[k], offsets[k + 1] - offsets[k]));
  while (sym.size() > 1) {
    float best_score = -std::numeric_limits<float>::infinity();
    size_t best = sym.size();
    for (size_t k = 0; k + 1 < sym.size(); ++k) {
      auto it = token_to_id_.find(sym[k] + sym[k + 1]);
      if (it == token_to_id_.end()) continue;
      float score = data_.scores[static_cast<size_t>(it->second)];
      if (score > best_score) {
        best_score = score;
        best = k;
      }
    }
    if (best == sym.size()) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<ptrdiff_t>(best) + 1);
  }
  for (const auto& p : sym) {
    if (auto it = token_to_id_.find(p); it != token_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (char c : p) {
      int32_t b = byte_tokens_[static_cast<uint8_t>(c)];
      if (b >= 0) {
        out.push_back(b);
      } else if (data_.unk) {
        out.push_back(*data_.unk);
      }
    }
  }
}

std::string Tokenizer::token_bytes(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size()) return {};
  const std::string& t = data_.tokens[static_cast<size_t>(id)];
  TokenType type = data_.types.empty() ? TokenType::normal : data_.types[static_cast<size_t>(id)];
  if (type == TokenType::control) return render_special ? t : std::string();
  if (type == TokenType::user_defined || type == TokenType::unknown) return t;
  if (data_.kind == VocabData::Kind::spm) {
    if (type == TokenType::byte && t.size() == 6) {
      return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    }
    return replace_all(t, spm_space, " ");
  }
  std::string bytes;
  for (char32_t cp : unicode::decode_utf8(t)) {
    int b = unicode::char_to_byte(cp);
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
    } else {
      unicode::append_utf8(bytes, cp);  // not a byte image: keep as text
    }
  }
  return bytes;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id, render_special);
  return out;
}

}  // namespace actorlm
