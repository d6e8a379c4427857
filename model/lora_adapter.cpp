#include "model/lora_adapter.hpp"

#include <cmath>
#include <map>
#include <string_view>

#include "model/gguf_file.hpp"

namespace actorlm {
namespace {

constexpr std::string_view kA = ".lora_a", kB = ".lora_b";

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

struct Pair {
  const GgufTensorInfo* a = nullptr;
  const GgufTensorInfo* b = nullptr;
};

// Where an adapted matrix goes: its layer (-1: the output head) and target.
struct Place {
  int32_t layer = -1;
  LoraTarget target = LoraTarget::q;
  int64_t out = 0, in = 0;  // the base matrix's shape
};

std::optional<LoraTarget> target_named(std::string_view name) {
  for (size_t t = 0; t < kLoraTargets; ++t) {
    if (name == kLoraTargetNames[t]) return static_cast<LoraTarget>(t);
  }
  return std::nullopt;
}

Place place_of(const std::string& file, const std::string& weight, const ModelConfig& c) {
  auto refuse = [&](const std::string& why) {
    return ModelError(file + ": LoRA tensor pair for " + weight + ": " + why);
  };
  if (weight == "output.weight") {
    if (c.tied_embeddings) throw refuse("the base model has no output.weight (its head is the token embedding)");
    return {-1, LoraTarget::q, c.vocab_size, c.hidden};
  }
  if (weight == "token_embd.weight") throw refuse("adapting the token embedding is not supported");
  const std::string_view w = weight;
  if (w.substr(0, 4) != "blk." || !ends_with(w, ".weight")) throw refuse("not a matrix of the base model");
  const std::string_view rest = w.substr(4, w.size() - 4 - 7);
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) throw refuse("not a matrix of the base model");
  int64_t layer = 0;
  for (char ch : rest.substr(0, dot)) {
    if (ch < '0' || ch > '9') throw refuse("not a matrix of the base model");
    layer = layer * 10 + (ch - '0');
  }
  if (layer >= c.n_layers) {
    throw refuse("the base model has " + std::to_string(c.n_layers) + " layers");
  }
  const std::string_view kind = rest.substr(dot + 1);
  const std::optional<LoraTarget> target = target_named(kind);
  if (!target) {
    throw refuse(kind == "attn_qkv" || kind == "ffn_up_gate" ? "fused matrices are not supported"
                                                              : "no adapter support for this matrix");
  }
  if (c.n_experts > 0 && (*target == LoraTarget::gate || *target == LoraTarget::up || *target == LoraTarget::down)) {
    throw refuse("the base model's FFN is a mixture of experts");
  }
  const auto [out, in] = lora_target_shape(c, *target);
  return {static_cast<int32_t>(layer), *target, out, in};
}

std::vector<float> floats(const std::string& file, const GgufTensorInfo& t) {
  if (!ggml_type_supported(static_cast<uint32_t>(t.type))) {
    throw ModelError(file + ": tensor " + t.name + " has unsupported type " + ggml_type_name(t.type));
  }
  const auto cols = static_cast<int64_t>(t.shape[0]), rows = static_cast<int64_t>(t.shape[1]);
  if (cols % static_cast<int64_t>(ggml_block_elements(t.type)) != 0) {
    throw ModelError(file + ": tensor " + t.name + " has a row length that is not a whole number of blocks");
  }
  std::vector<float> v(static_cast<size_t>(rows * cols));
  dequantize_rows(t.type, t.data, v.data(), rows, cols);
  return v;
}

}  // namespace

std::pair<int64_t, int64_t> lora_target_shape(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::q: return {c.q_dim(), c.hidden};
    case LoraTarget::k:
    case LoraTarget::v: return {c.kv_dim(), c.hidden};
    case LoraTarget::o: return {c.hidden, c.q_dim()};
    case LoraTarget::gate:
    case LoraTarget::up: return {c.ffn_hidden, c.hidden};
    case LoraTarget::down: return {c.hidden, c.ffn_hidden};
  }
  return {0, 0};
}

int64_t LoraAdapter::matrices() const {
  int64_t n = output ? 1 : 0;
  for (const auto& layer : layers) {
    for (const auto& m : layer) n += m ? 1 : 0;
  }
  return n;
}

int64_t LoraAdapter::bytes() const {
  auto of = [](const std::optional<LowRankMatrix>& m) {
    return m ? static_cast<int64_t>((m->a.size() + m->b.size()) * sizeof(uint16_t)) : 0;
  };
  int64_t n = of(output);
  for (const auto& layer : layers) {
    for (const auto& m : layer) n += of(m);
  }
  return n;
}

LoraAdapter load_lora_adapter(const std::string& path, const ModelConfig& base, float scale) {
  if (!std::isfinite(scale)) throw ModelError(path + ": the adapter's scale must be a finite number");
  const GgufFile file = GgufFile::open(path);
  const std::string type = file.get_string("general.type").value_or("");
  if (type != "adapter") {
    throw ModelError(path + ": general.type is '" + type + "', not 'adapter' (is this a model rather than a LoRA?)");
  }
  const std::string adapter_type = file.get_string("adapter.type").value_or("");
  if (adapter_type != "lora") throw ModelError(path + ": adapter.type is '" + adapter_type + "', not 'lora'");
  const std::string arch = file.get_string("general.architecture").value_or("");
  if (arch != base.architecture) {
    throw ModelError(path + ": an adapter for architecture '" + arch + "', the model is '" + base.architecture + "'");
  }
  LoraAdapter adapter;
  adapter.path = path;
  adapter.scale = scale;
  const double alpha = file.get_float("adapter.lora.alpha").value_or(0.0);
  if (!std::isfinite(alpha)) throw ModelError(path + ": adapter.lora.alpha is not a finite number");
  adapter.alpha = static_cast<float>(alpha);
  adapter.layers.resize(static_cast<size_t>(base.n_layers));

  std::map<std::string, Pair> pairs;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (ends_with(t.name, kA)) {
      pairs[t.name.substr(0, t.name.size() - kA.size())].a = &t;
    } else if (ends_with(t.name, kB)) {
      pairs[t.name.substr(0, t.name.size() - kB.size())].b = &t;
    } else {
      throw ModelError(path + ": tensor " + t.name + " is neither a .lora_a nor a .lora_b half");
    }
  }
  if (pairs.empty()) throw ModelError(path + ": the adapter has no tensors");
  for (const auto& [weight, pair] : pairs) {
    if (!pair.a || !pair.b) {
      throw ModelError(path + ": LoRA tensor pair for " + weight + " is missing its " + (pair.a ? "lora_b" : "lora_a"));
    }
    const Place place = place_of(path, weight, base);
    const GgufTensorInfo &a = *pair.a, &b = *pair.b;
    // ggml shapes: A {in, rank}, B {rank, out}.
    if (a.shape.size() != 2 || b.shape.size() != 2 || a.shape[0] != static_cast<uint64_t>(place.in) ||
        b.shape[1] != static_cast<uint64_t>(place.out) || a.shape[1] != b.shape[0] || a.shape[1] == 0 ||
        a.shape[1] > 4096) {
      throw ModelError(path + ": LoRA tensor pair for " + weight + " has shapes that do not fit the base matrix [" +
                       std::to_string(place.out) + "][" + std::to_string(place.in) +
                       "] (lora_a must be {in, rank}, lora_b {rank, out}, rank 1..4096)");
    }
    LowRankMatrix m;
    m.rank = static_cast<int32_t>(a.shape[1]);
    m.in = place.in;
    m.out = place.out;
    m.a = floats(path, a);
    m.b = floats(path, b);
    m.scale = adapter.alpha != 0 ? scale * adapter.alpha / static_cast<float>(m.rank) : scale;
    if (place.layer < 0) {
      adapter.output = std::move(m);
    } else {
      adapter.layers[static_cast<size_t>(place.layer)][static_cast<size_t>(place.target)] = std::move(m);
    }
  }
  return adapter;
}

}  // namespace actorlm
