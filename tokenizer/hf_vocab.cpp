// VocabData from a Hugging Face tokenizer.json (BPE models only: byte-level
// like GPT-2 / SmolLM / Llama 3 / Qwen2, or SentencePiece-converted like
// Llama 2 with byte_fallback), plus tokenizer_config.json beside it.

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "model/gguf_file.hpp"
#include "tokenizer/vocab.hpp"

namespace actorlm {
namespace {

using nlohmann::json;

// Every object of the given "type" in a normalizer / pre_tokenizer /
// decoder tree (Sequence nodes are walked).
void collect_typed(const json& node, const std::string& type, std::vector<const json*>& out) {
  if (node.is_array()) {
    for (const auto& child : node) collect_typed(child, type, out);
    return;
  }
  if (!node.is_object()) return;
  if (node.value("type", "") == type) out.push_back(&node);
  for (const auto& [key, child] : node.items()) {
    if (child.is_structured()) collect_typed(child, type, out);
  }
}

bool has_typed(const json& node, const std::string& type) {
  std::vector<const json*> found;
  collect_typed(node, type, found);
  return !found.empty();
}

// "bos_token": "<s>" or {"content": "<s>", ...}
std::optional<std::string> token_content(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return std::nullopt;
}

PreTokenizer detect_pre(const json& pre, std::vector<std::string>& warnings) {
  std::vector<const json*> splits;
  collect_typed(pre, "Split", splits);
  for (const json* s : splits) {
    std::string regex = s->value("pattern", json::object()).value("Regex", "");
    if (regex.find("\\p{N}{1,3}") != std::string::npos) return PreTokenizer::llama3;
    if (regex.find("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+") != std::string::npos) return PreTokenizer::qwen2;
  }
  std::vector<const json*> digits;
  collect_typed(pre, "Digits", digits);
  for (const json* d : digits) {
    if (d->value("individual_digits", false)) return PreTokenizer::smollm;
  }
  std::vector<const json*> byte_level;
  collect_typed(pre, "ByteLevel", byte_level);
  for (const json* b : byte_level) {
    if (b->value("add_prefix_space", false)) warnings.push_back("ByteLevel add_prefix_space is not supported; ignored");
  }
  if (!splits.empty()) warnings.push_back("unrecognised Split pre-tokenizer regex; using the GPT-2 split rules");
  return PreTokenizer::gpt2;
}

void read_config(const std::filesystem::path& path, VocabData& d, std::unordered_map<std::string, int32_t>& ids) {
  std::ifstream in(path);
  if (!in) return;
  json c;
  try {
    c = json::parse(in);
  } catch (const json::exception& e) {
    throw ModelError(path.string() + ": " + e.what());
  }
  auto id_of = [&](const char* key) -> std::optional<int32_t> {
    auto text = token_content(c, key);
    if (!text) return std::nullopt;
    auto it = ids.find(*text);
    if (it == ids.end()) {
      d.warnings.push_back(std::string(key) + " '" + *text + "' is not in the vocabulary; ignored");
      return std::nullopt;
    }
    return it->second;
  };
  if (auto v = id_of("bos_token")) d.bos = v;
  if (auto v = id_of("eos_token")) d.eos = v;
  if (auto v = id_of("unk_token")) d.unk = v;
  if (auto it = c.find("add_bos_token"); it != c.end() && it->is_boolean()) d.add_bos = it->get<bool>();
  if (auto it = c.find("chat_template"); it != c.end()) {
    if (it->is_string()) {
      d.chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // named templates: take "default"
      for (const auto& t : *it) {
        if (t.value("name", "") == "default") d.chat_template = t.value("template", "");
      }
    }
  }
}

VocabData parse(const std::string& path, const json& j) {
  const json& m = j.at("model");
  const std::string type = m.value("type", "");
  if (type != "BPE") throw ModelError("model.type is '" + type + "'; only BPE is supported");

  VocabData d;
  const json& normalizer = j.contains("normalizer") ? j["normalizer"] : json();
  const json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
  const json& decoder = j.contains("decoder") ? j["decoder"] : json();
  const bool byte_level = has_typed(pre, "ByteLevel") || has_typed(decoder, "ByteLevel");
  const bool metaspace = has_typed(pre, "Metaspace") || normalizer.dump().find("\xE2\x96\x81") != std::string::npos;
  if (byte_level) {
    d.kind = VocabData::Kind::byte_bpe;
    d.pre = detect_pre(pre, d.warnings);
  } else if (m.value("byte_fallback", false) || metaspace) {
    d.kind = VocabData::Kind::spm;
    std::vector<const json*> prepends, metas;
    collect_typed(normalizer, "Prepend", prepends);
    collect_typed(pre, "Metaspace", metas);
    d.add_space_prefix = !prepends.empty();
    for (const json* ms : metas) {
      if (ms->value("add_prefix_space", false) || ms->value("prepend_scheme", "never") != "never") d.add_space_prefix = true;
    }
  } else {
    throw ModelError("a BPE model that is neither byte-level nor SentencePiece-style is not supported");
  }
  d.ignore_merges = m.value("ignore_merges", false);

  std::unordered_map<std::string, int32_t> ids;
  int64_t n = 0;
  for (const auto& [tok, id] : m.at("vocab").items()) {
    int64_t v = id.get<int64_t>();
    if (v < 0 || v >= INT32_MAX) throw ModelError("model.vocab['" + tok + "'] = " + std::to_string(v) + " is out of range");
    ids[tok] = static_cast<int32_t>(v);
    n = std::max(n, v + 1);
  }
  const json added = j.value("added_tokens", json::array());
  for (const auto& t : added) {
    int64_t v = t.at("id").get<int64_t>();
    if (v < 0 || v >= INT32_MAX) throw ModelError("added_tokens id " + std::to_string(v) + " is out of range");
    n = std::max(n, v + 1);
  }
  if (n == 0) throw ModelError("model.vocab is empty");
  if (n > 16 * 1024 * 1024) throw ModelError("vocabulary of " + std::to_string(n) + " ids is implausibly large");
  d.tokens.assign(static_cast<size_t>(n), "");
  d.types.assign(static_cast<size_t>(n), TokenType::unused);  // ids nobody names stay unused
  for (const auto& [tok, id] : ids) {
    d.tokens[static_cast<size_t>(id)] = tok;
    d.types[static_cast<size_t>(id)] = TokenType::normal;
  }
  if (d.kind == VocabData::Kind::spm) {
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      const std::string& t = d.tokens[i];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') d.types[i] = TokenType::byte;
    }
  }
  for (const auto& t : added) {
    auto id = static_cast<size_t>(t.at("id").get<int64_t>());
    d.tokens[id] = t.at("content").get<std::string>();
    d.types[id] = t.value("special", false) ? TokenType::control : TokenType::user_defined;
    ids[d.tokens[id]] = static_cast<int32_t>(id);
  }
  if (auto unk = m.find("unk_token"); unk != m.end() && unk->is_string()) {
    if (auto it = ids.find(unk->get<std::string>()); it != ids.end()) {
      d.unk = it->second;
      if (d.types[static_cast<size_t>(it->second)] == TokenType::normal) d.types[static_cast<size_t>(it->second)] = TokenType::unknown;
    }
  }
  for (const auto& mg : m.at("merges")) {
    std::pair<std::string, std::string> p;
    if (mg.is_string()) {
      if (!split_merge(mg.get<std::string>(), &p)) throw ModelError("merge '" + mg.get<std::string>() + "' is not 'left right'");
    } else {
      p = {mg.at(0).get<std::string>(), mg.at(1).get<std::string>()};
    }
    d.merges.push_back(std::move(p));
  }

  // A post-processor that puts a special token before every sequence adds BOS
  // (Llama 3's tokenizer.json does this instead of add_bos_token).
  if (j.contains("post_processor") && j["post_processor"].is_object()) {
    const json& single = j["post_processor"].value("single", json::array());
    if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
      std::string text = single[0]["SpecialToken"].value("id", "");
      if (auto it = ids.find(text); it != ids.end()) {
        d.bos = it->second;
        d.add_bos = true;
      }
    }
  }
  read_config(std::filesystem::path(path).parent_path() / "tokenizer_config.json", d, ids);
  return d;
}

}  // namespace

VocabData vocab_from_hf_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ModelError(path + ": cannot open");
  try {
    return parse(path, json::parse(in));
  } catch (const ModelError& e) {
    throw ModelError(path + ": " + e.what());
  } catch (const json::exception& e) {
    throw ModelError(path + ": " + e.what());
  }
}

}  // namespace actorlm
