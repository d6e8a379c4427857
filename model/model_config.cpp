#include "model/model_config.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/gguf_file.hpp"

namespace actorlm {

void ModelConfig::validate() const {
  auto fail = [](const std::string& why) { throw ModelError("invalid model config: " + why); };
  if (n_layers < 1 || n_layers > 1024) fail("n_layers " + std::to_string(n_layers));
  if (hidden < 1 || n_heads < 1 || n_kv_heads < 1 || head_dim < 1) fail("hidden, heads and head_dim must be positive");
  if (n_heads % n_kv_heads != 0) fail("n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv_heads " + std::to_string(n_kv_heads));
  if (head_dim % 2 != 0) fail("head_dim must be even for RoPE");
  if (ffn_hidden < 1) fail("ffn_hidden must be positive");
  if (vocab_size < 2) fail("vocab_size " + std::to_string(vocab_size));
  if (max_context < 1) fail("max_context must be positive");
  if (!(rope_theta > 0)) fail("rope_theta must be positive");
  if (!(rms_norm_eps > 0 && rms_norm_eps < 1)) fail("rms_norm_eps out of range");
  if (rope_scaling.kind == RopeScaling::Kind::llama3 &&
      !(rope_scaling.factor >= 1 && rope_scaling.high_freq_factor > rope_scaling.low_freq_factor))
    fail("llama3 rope scaling needs factor >= 1 and high_freq_factor > low_freq_factor");
}

ModelConfig config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture").value_or("");
  if (c.architecture != "llama" && c.architecture != "qwen2") {
    throw ModelError(f.path() + ": unsupported architecture '" + c.architecture + "' (llama and qwen2 are)");
  }
  const std::string a = c.architecture + ".";
  auto need_int = [&](const std::string& key) {
    auto v = f.get_int(key);
    if (!v) throw ModelError(f.path() + ": missing metadata " + key);
    return static_cast<int32_t>(*v);
  };
  c.n_layers = need_int(a + "block_count");
  c.hidden = need_int(a + "embedding_length");
  c.n_heads = need_int(a + "attention.head_count");
  c.n_kv_heads = static_cast<int32_t>(f.get_int(a + "attention.head_count_kv").value_or(c.n_heads));
  c.ffn_hidden = need_int(a + "feed_forward_length");
  c.max_context = need_int(a + "context_length");
  c.head_dim = static_cast<int32_t>(f.get_int(a + "attention.key_length").value_or(c.n_heads ? c.hidden / c.n_heads : 0));
  c.rope_theta = static_cast<float>(f.get_float(a + "rope.freq_base").value_or(10000.0));
  c.rms_norm_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (auto v = f.get_int(a + "vocab_size")) {
    c.vocab_size = static_cast<int32_t>(*v);
  } else if (auto toks = f.get_string_array("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int32_t>(toks->size());
  }
  if (auto t = f.get_string(a + "rope.scaling.type"); t && *t != "none") {
    if (*t != "llama3") throw ModelError(f.path() + ": unsupported rope scaling '" + *t + "'");
    c.rope_scaling.kind = RopeScaling::Kind::llama3;
    c.rope_scaling.factor = static_cast<float>(f.get_float(a + "rope.scaling.factor").value_or(8.0));
  }
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (auto v = f.get_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = static_cast<int32_t>(*v);
  if (auto v = f.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_id = static_cast<int32_t>(*v);
  try {
    c.validate();
  } catch (const ModelError& e) {
    throw ModelError(f.path() + ": " + e.what());
  }
  return c;
}

ModelConfig config_from_hf_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ModelError(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw ModelError(path + ": not valid JSON: " + e.what());
  }
  ModelConfig c;
  try {
    std::string type = j.value("model_type", "llama");
    if (type != "llama" && type != "qwen2") throw ModelError("unsupported model_type '" + type + "'");
    c.architecture = type;
    c.n_layers = j.at("num_hidden_layers").get<int32_t>();
    c.hidden = j.at("hidden_size").get<int32_t>();
    c.n_heads = j.at("num_attention_heads").get<int32_t>();
    c.n_kv_heads = j.value("num_key_value_heads", c.n_heads);
    c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? j["head_dim"].get<int32_t>()
                                                                      : (c.n_heads ? c.hidden / c.n_heads : 0);
    c.ffn_hidden = j.at("intermediate_size").get<int32_t>();
    c.vocab_size = j.at("vocab_size").get<int32_t>();
    c.max_context = j.value("max_position_embeddings", 2048);
    c.rope_theta = j.value("rope_theta", 10000.0f);
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-5f);
    c.tied_embeddings = j.value("tie_word_embeddings", false);
    c.attention_bias = j.value("attention_bias", type == "qwen2");
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
      const auto& rs = j["rope_scaling"];
      std::string kind = rs.value("rope_type", rs.value("type", ""));
      if (kind == "llama3") {
        c.rope_scaling.kind = RopeScaling::Kind::llama3;
        c.rope_scaling.factor = rs.value("factor", 8.0f);
        c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0f);
        c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0f);
        c.rope_scaling.original_max_position = rs.value("original_max_position_embeddings", 8192);
      } else if (!kind.empty() && kind != "default") {
        throw ModelError("unsupported rope_scaling type '" + kind + "'");
      }
    }
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = j["bos_token_id"].get<int32_t>();
    if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer()) c.eos_token_id = j["eos_token_id"].get<int32_t>();
    c.validate();
  } catch (const ModelError& e) {
    throw ModelError(path + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(path + ": " + e.what());
  }
  return c;
}

}  // namespace actorlm
