#include "model/model_config.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/architecture.hpp"
#include "model/gguf_file.hpp"

namespace actorlm {
namespace {

[[noreturn]] void invalid(const std::string& why) { throw ModelError("invalid model config: " + why); }

void check_range(const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    invalid(std::string(name) + " " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "]");
  }
}

// Integers in metadata are int64; anything a config field cannot hold is an
// error rather than a silent wrap.
int32_t to_i32(int64_t v, const std::string& where) {
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
    throw ModelError(where + " = " + std::to_string(v) + " is out of range");
  }
  return static_cast<int32_t>(v);
}

// head_dim when the file does not state it: hidden split evenly over heads.
int32_t implied_head_dim(int32_t hidden, int32_t n_heads) {
  if (n_heads <= 0) invalid("n_heads " + std::to_string(n_heads));
  if (hidden % n_heads != 0) {
    invalid("hidden " + std::to_string(hidden) + " is not a multiple of n_heads " + std::to_string(n_heads) +
            " and no head_dim is given");
  }
  return hidden / n_heads;
}

// ---------------------------------------------------------------- config.json
const nlohmann::json* member(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int32_t json_i32(const nlohmann::json& v, const char* key) {
  if (!v.is_number_integer()) throw ModelError(std::string(key) + " is not an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    throw ModelError(std::string(key) + " = " + std::to_string(v.get<uint64_t>()) + " is out of range");
  }
  return to_i32(v.get<int64_t>(), key);
}

int32_t json_i32(const nlohmann::json& j, const char* key, std::optional<int32_t> fallback) {
  const nlohmann::json* v = member(j, key);
  if (!v) {
    if (!fallback) throw ModelError(std::string("missing ") + key);
    return *fallback;
  }
  return json_i32(*v, key);
}

float json_float(const nlohmann::json& j, const char* key, float fallback) {
  const nlohmann::json* v = member(j, key);
  if (!v) return fallback;
  if (!v->is_number()) throw ModelError(std::string(key) + " is not a number");
  return v->get<float>();
}

// A token id, or the first of a list of them (Llama 3.1 lists several eos ids).
std::optional<int32_t> json_token(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = member(j, key);
  if (!v) return std::nullopt;
  if (v->is_array()) {
    if (v->empty()) return std::nullopt;
    return json_i32(v->front(), key);
  }
  return json_i32(*v, key);
}

}  // namespace

void ModelConfig::validate() const {
  if (!find_architecture(architecture)) invalid("architecture '" + architecture + "'");
  check_range("n_layers", n_layers, 1, 1024);
  check_range("hidden", hidden, 1, 65536);
  check_range("n_heads", n_heads, 1, 1024);
  check_range("n_kv_heads", n_kv_heads, 1, n_heads);
  if (n_heads % n_kv_heads != 0) {
    invalid("n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv_heads " + std::to_string(n_kv_heads));
  }
  check_range("head_dim", head_dim, 2, 1024);
  if (head_dim % 2 != 0) invalid("head_dim " + std::to_string(head_dim) + " must be even for RoPE");
  check_range("ffn_hidden", ffn_hidden, 1, 1 << 20);
  check_range("vocab_size", vocab_size, 2, 1 << 23);
  check_range("max_context", max_context, 1, 1 << 24);
  if (!(std::isfinite(rope_theta) && rope_theta > 0)) invalid("rope_theta must be positive");
  if (!(rms_norm_eps > 0 && rms_norm_eps < 1)) invalid("rms_norm_eps " + std::to_string(rms_norm_eps) + " out of (0, 1)");
  if (rope_scaling.kind == RopeScaling::Kind::llama3) {
    const auto& rs = rope_scaling;
    if (!(std::isfinite(rs.factor) && rs.factor >= 1 && rs.low_freq_factor > 0 &&
          rs.high_freq_factor > rs.low_freq_factor && std::isfinite(rs.high_freq_factor))) {
      invalid("llama3 rope scaling needs factor >= 1 and 0 < low_freq_factor < high_freq_factor");
    }
    check_range("original_max_position_embeddings", rs.original_max_position, 1, 1 << 24);
  }
  if (rope_scaling.kind == RopeScaling::Kind::linear && !(std::isfinite(rope_scaling.factor) && rope_scaling.factor > 0)) {
    invalid("linear rope scaling needs a positive factor");
  }
  auto finite_at_least = [](const char* name, float v, float lo) {
    if (!(std::isfinite(v) && v >= lo)) invalid(std::string(name) + " " + std::to_string(v) + " is out of range");
  };
  finite_at_least("embedding_scale", embedding_scale, 1e-30f);
  finite_at_least("attention_scale", attention_scale, 0.0f);
  finite_at_least("attn_logit_softcapping", attn_softcap, 0.0f);
  finite_at_least("final_logit_softcapping", final_softcap, 0.0f);
  finite_at_least("rope.freq_base_swa", rope_theta_swa, 0.0f);
  check_range("sliding_window", sliding_window, 0, 1 << 24);
  if (n_experts > 0) {
    check_range("expert_count", n_experts, 1, 1024);
    check_range("expert_used_count", n_experts_used, 1, n_experts);
    check_range("expert_feed_forward_length", expert_ffn_hidden, 1, 1 << 20);
    finite_at_least("expert_weights_scale", expert_weights_scale, 1e-30f);
  }
  for (const auto* per_layer : {&sliding_layers, &rope_layers}) {
    if (!per_layer->empty() && per_layer->size() != static_cast<size_t>(n_layers)) {
      invalid("a per-layer list has " + std::to_string(per_layer->size()) + " entries for " +
              std::to_string(n_layers) + " layers");
    }
  }
  if (bos_token_id) check_range("bos_token_id", *bos_token_id, 0, vocab_size - 1);
  if (eos_token_id) check_range("eos_token_id", *eos_token_id, 0, vocab_size - 1);
}

std::string ModelConfig::features_beyond_llama() const {
  std::string out;
  auto add = [&](bool has, const char* name) {
    if (has) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(qk_norm, "q/k norms");
  add(sandwich_norm, "post-attention/FFN norms");
  add(activation != Activation::silu, "GELU");
  add(embedding_scale != 1.0f, "embedding scale");
  add(attention_scale > 0, "attention scale");
  add(attn_softcap > 0 || final_softcap > 0, "softcapping");
  add(sliding_window > 0, "sliding-window attention");
  add(!rope_layers.empty(), "layers without RoPE");
  add(rope_scaling.kind == RopeScaling::Kind::linear, "linear RoPE scaling");
  add(n_experts > 0, "mixture of experts");
  return out;
}

std::string ModelConfig::features_not_on_cuda() const { return n_experts > 0 ? "mixture of experts" : ""; }

ModelConfig config_from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture").value_or("");
  const Architecture* arch = find_architecture(c.architecture);
  if (!arch) {
    throw ModelError(f.path() + ": unsupported architecture '" + c.architecture + "' (" + supported_architectures() +
                     " are)");
  }
  const std::string a = c.architecture + ".";
  auto opt_int = [&](const std::string& key) -> std::optional<int32_t> {
    auto v = f.get_int(key);
    if (!v) return std::nullopt;
    return to_i32(*v, f.path() + ": metadata " + key);
  };
  auto need_int = [&](const std::string& key) {
    auto v = opt_int(key);
    if (!v) throw ModelError(f.path() + ": missing metadata " + key);
    return *v;
  };
  try {
    c.n_layers = need_int(a + "block_count");
    c.hidden = need_int(a + "embedding_length");
    c.n_heads = need_int(a + "attention.head_count");
    c.n_kv_heads = opt_int(a + "attention.head_count_kv").value_or(c.n_heads);
    c.ffn_hidden = need_int(a + "feed_forward_length");
    c.max_context = need_int(a + "context_length");
    if (auto k = opt_int(a + "attention.key_length")) {
      c.head_dim = *k;
      if (auto v = opt_int(a + "attention.value_length"); v && *v != *k) {
        throw ModelError(f.path() + ": value_length " + std::to_string(*v) + " differs from key_length " +
                         std::to_string(*k) + " (not supported)");
      }
    } else {
      c.head_dim = implied_head_dim(c.hidden, c.n_heads);
    }
    if (auto rot = opt_int(a + "rope.dimension_count"); rot && *rot != c.head_dim) {
      throw ModelError(f.path() + ": " + a + "rope.dimension_count " + std::to_string(*rot) +
                       " differs from head_dim " + std::to_string(c.head_dim) + " (partial RoPE is not supported)");
    }
    c.rope_theta = static_cast<float>(f.get_float(a + "rope.freq_base").value_or(10000.0));
    c.rms_norm_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    if (auto v = opt_int(a + "vocab_size")) {
      c.vocab_size = *v;
    } else if (auto toks = f.get_string_array("tokenizer.ggml.tokens")) {
      c.vocab_size = to_i32(static_cast<int64_t>(toks->size()), f.path() + ": tokenizer.ggml.tokens length");
    } else if (const GgufTensorInfo* e = f.find_tensor("token_embd.weight"); e && e->shape.size() == 2) {
      c.vocab_size = to_i32(static_cast<int64_t>(e->shape[1]), f.path() + ": token_embd.weight rows");
    }
    // Llama 3.1 GGUFs carry their scaling as the rope_freqs tensor instead.
    if (auto t = f.get_string(a + "rope.scaling.type"); t && *t != "none") {
      if (*t == "llama3") {
        c.rope_scaling.kind = RopeScaling::Kind::llama3;
        c.rope_scaling.factor = static_cast<float>(f.get_float(a + "rope.scaling.factor").value_or(8.0));
        if (auto n = opt_int(a + "rope.scaling.original_context_length")) c.rope_scaling.original_max_position = *n;
      } else if (*t == "linear") {
        c.rope_scaling.kind = RopeScaling::Kind::linear;
        c.rope_scaling.factor = static_cast<float>(f.get_float(a + "rope.scaling.factor").value_or(1.0));
      } else {
        throw ModelError(f.path() + ": unsupported rope scaling '" + *t + "' (llama3 and linear are)");
      }
    }
    c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
    c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.bos_token_id = opt_int("tokenizer.ggml.bos_token_id");
    c.eos_token_id = opt_int("tokenizer.ggml.eos_token_id");
    if (auto experts = opt_int(a + "expert_count"); experts && *experts > 0) {
      c.n_experts = *experts;
      c.n_experts_used = need_int(a + "expert_used_count");
      c.expert_ffn_hidden = opt_int(a + "expert_feed_forward_length").value_or(c.ffn_hidden);
      c.expert_weights_scale = static_cast<float>(f.get_float(a + "expert_weights_scale").value_or(1.0));
      if (c.expert_weights_scale == 0.0f) c.expert_weights_scale = 1.0f;  // llama.cpp: 0 means unset
    }
    arch->configure(f, a, c);
    c.validate();
  } catch (const ModelError& e) {
    std::string what = e.what();
    if (what.rfind(f.path(), 0) == 0) throw;
    throw ModelError(f.path() + ": " + what);
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
    if (!j.is_object()) throw ModelError("not a JSON object");
    std::string type = j.value("model_type", "llama");
    if (type != "llama" && type != "qwen2") throw ModelError("unsupported model_type '" + type + "'");
    c.architecture = type;
    if (std::string act = j.value("hidden_act", "silu"); act != "silu") {
      throw ModelError("unsupported hidden_act '" + act + "' (silu is)");
    }
    c.n_layers = json_i32(j, "num_hidden_layers", std::nullopt);
    c.hidden = json_i32(j, "hidden_size", std::nullopt);
    c.n_heads = json_i32(j, "num_attention_heads", std::nullopt);
    c.n_kv_heads = json_i32(j, "num_key_value_heads", c.n_heads);
    c.head_dim = member(j, "head_dim") ? json_i32(j, "head_dim", std::nullopt) : implied_head_dim(c.hidden, c.n_heads);
    c.ffn_hidden = json_i32(j, "intermediate_size", std::nullopt);
    c.vocab_size = json_i32(j, "vocab_size", std::nullopt);
    c.max_context = json_i32(j, "max_position_embeddings", 2048);
    // transformers 5 writes RoPE settings (theta and scaling together) as
    // rope_parameters; older configs use rope_theta and rope_scaling.
    const nlohmann::json* rope_params = member(j, "rope_parameters");
    if (rope_params && !rope_params->is_object()) throw ModelError("rope_parameters is not an object");
    c.rope_theta = json_float(j, "rope_theta", rope_params ? json_float(*rope_params, "rope_theta", 10000.0f) : 10000.0f);
    c.rms_norm_eps = json_float(j, "rms_norm_eps", 1e-5f);
    c.tied_embeddings = j.value("tie_word_embeddings", false);
    // Qwen2 always has q/k/v biases; a Llama with attention_bias would also
    // bias o_proj, which the loader refuses when it finds that tensor.
    c.attention_bias = type == "qwen2" || j.value("attention_bias", false);
    const nlohmann::json* scaling = member(j, "rope_scaling");
    if (!scaling) scaling = rope_params;
    if (const nlohmann::json* rs = scaling) {
      if (!rs->is_object()) throw ModelError("rope_scaling is not an object");
      std::string kind = rs->value("rope_type", rs->value("type", ""));
      if (kind == "llama3") {
        c.rope_scaling.kind = RopeScaling::Kind::llama3;
        c.rope_scaling.factor = json_float(*rs, "factor", 8.0f);
        c.rope_scaling.low_freq_factor = json_float(*rs, "low_freq_factor", 1.0f);
        c.rope_scaling.high_freq_factor = json_float(*rs, "high_freq_factor", 4.0f);
        c.rope_scaling.original_max_position = json_i32(*rs, "original_max_position_embeddings", 8192);
      } else if (!kind.empty() && kind != "default") {
        throw ModelError("unsupported rope_scaling type '" + kind + "'");
      }
    }
    c.bos_token_id = json_token(j, "bos_token_id");
    c.eos_token_id = json_token(j, "eos_token_id");
    c.validate();
  } catch (const ModelError& e) {
    throw ModelError(path + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(path + ": " + e.what());
  }
  return c;
}

}  // namespace actorlm
