#include "model/llama_model.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace actorlm {
RopeTable make_rope_table(const ModelConfig& c, const std::vector<float>& freq_factors, bool sliding) {
  RopeTable t;
  t.head_dim = c.head_dim;
  const int32_t pairs = c.head_dim / 2;
  const auto& rs = c.rope_scaling;
  const double theta = sliding && c.rope_theta_swa > 0 ? c.rope_theta_swa : c.rope_theta;
  for (int32_t i = 0; i < pairs; ++i) {
    double f = std::pow(theta, -2.0 * i / c.head_dim);
    if (sliding) {
      // Local layers keep the trained positions.
    } else if (!freq_factors.empty()) {
      f /= freq_factors[static_cast<size_t>(i)];
    } else if (rs.kind == RopeScaling::Kind::linear) {
      f /= rs.factor;
    } else if (rs.kind == RopeScaling::Kind::llama3) {
      // Long wavelengths are stretched by `factor`, short ones kept, and the
      // band between blended smoothly.
      double wavelen = 2.0 * M_PI / f;
      double low_wavelen = rs.original_max_position / rs.low_freq_factor;
      double high_wavelen = rs.original_max_position / rs.high_freq_factor;
      if (wavelen > low_wavelen) {
        f /= rs.factor;
      } else if (wavelen >= high_wavelen) {
        double smooth = (rs.original_max_position / wavelen - rs.low_freq_factor) /
                        (rs.high_freq_factor - rs.low_freq_factor);
        f = (1 - smooth) * f / rs.factor + smooth * f;
      }
    }
    t.inv_freq.push_back(static_cast<float>(f));
  }
  return t;
}

LlamaModel::LlamaModel(const ModelConfig& config, TensorOps& ops) : config_(config), ops_(ops) {}

LlamaModel::LlamaModel(const LlamaWeights& w, TensorOps& ops) : LlamaModel(w.config, ops) {
  const ModelConfig& c = config_;
  auto matrices = [&](std::initializer_list<const WeightMatrix*> parts) {
    std::vector<MatrixView> views;
    for (const WeightMatrix* m : parts) views.push_back(m->view());
    return ops.add_weights(views);
  };
  auto vector = [&](const std::vector<float>& v) { return v.empty() ? VectorId{} : ops.add_vector(v); };
  rope_ = ops.add_rope(make_rope_table(c, w.rope_freq_factors));
  rope_sliding_ = ops.add_rope(make_rope_table(c, w.rope_freq_factors, /*sliding=*/true));
  embedding_ = ops.add_table(w.token_embedding.view());
  output_ = matrices({&w.output()});
  output_norm_ = vector(w.output_norm);
  for (const LayerWeights& L : w.layers) {
    Layer d;
    d.attn_norm = vector(L.attn_norm);
    d.ffn_norm = vector(L.ffn_norm);
    d.qkv = matrices({&L.wq, &L.wk, &L.wv});
    d.wo = matrices({&L.wo});
    d.bias = !L.bq.empty();
    d.bq = vector(L.bq);
    d.bk = vector(L.bk);
    d.bv = vector(L.bv);
    d.has_q_norm = !L.q_norm.empty();
    d.q_norm = vector(L.q_norm);
    d.k_norm = vector(L.k_norm);
    d.has_post_norms = !L.post_attn_norm.empty();
    d.post_attn_norm = vector(L.post_attn_norm);
    d.post_ffn_norm = vector(L.post_ffn_norm);
    if (L.experts.empty()) {
      d.gate_up = matrices({&L.w_gate, &L.w_up});
      d.down = matrices({&L.w_down});
    } else {
      d.router = matrices({&L.router});
      for (const auto& e : L.experts) d.experts.emplace_back(matrices({&e.gate, &e.up}), matrices({&e.down}));
    }
    layers_.push_back(std::move(d));
  }
}

LlamaModel LlamaModel::random(const ModelConfig& c, TensorOps& ops, uint64_t seed) {
  if (const std::string extra = c.features_beyond_llama(); !extra.empty()) {
    throw std::invalid_argument("random model: plain Llama layers only, not " + extra);
  }
  LlamaModel m(c, ops);
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_hidden, V = c.vocab_size;
  auto random = [&](std::initializer_list<int64_t> rows, int64_t cols, bool cols_scale = true) {
    const std::vector<int64_t> parts(rows);
    WeightId id = ops.add_random_weights(parts, cols, seed, cols_scale);
    seed += parts.size();
    return id;
  };
  const std::vector<float> ones(static_cast<size_t>(H), 1.0f);
  m.rope_ = m.rope_sliding_ = ops.add_rope(make_rope_table(c, {}));
  m.embedding_ = random({V}, H, /*cols_scale=*/false);
  m.output_ = random({V}, H);
  m.output_norm_ = ops.add_vector(ones);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    Layer d;
    d.attn_norm = ops.add_vector(ones);
    d.ffn_norm = ops.add_vector(ones);
    d.qkv = random({Q, KV, KV}, H);
    d.wo = random({H}, Q);
    d.gate_up = random({F, F}, H);
    d.down = random({H}, F);
    m.layers_.push_back(std::move(d));
  }
  return m;
}

// Tokens are grouped by expert and each expert multiplies its rows as one
// batch; a token's outputs are added to x in expert order, so its result
// does not depend on which other tokens share the batch.
void LlamaModel::experts_into_residual(const Layer& L, Tensor h, Tensor x) {
  const ModelConfig& c = config_;
  const int64_t T = h.rows, H = c.hidden, F = c.expert_ffn_hidden;
  const int32_t E = c.n_experts, K = c.n_experts_used;
  Tensor logits = ops_.alloc(T, E, Use::state);
  ops_.matmul(h, L.router, {&logits, 1});
  const std::vector<ExpertChoice> chosen = ops_.route_experts(logits, K, /*normalize=*/true, c.expert_weights_scale);
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int32_t j = 0; j < K; ++j) {
      const ExpertChoice& ch = chosen[static_cast<size_t>(t * K + j)];
      rows[static_cast<size_t>(ch.expert)].push_back(static_cast<int32_t>(t));
      weights[static_cast<size_t>(ch.expert)].push_back(ch.weight);
    }
  }
  for (int32_t e = 0; e < E; ++e) {
    const auto& r = rows[static_cast<size_t>(e)];
    if (r.empty()) continue;
    const auto n = static_cast<int64_t>(r.size());
    const auto& [gate_up, down] = L.experts[static_cast<size_t>(e)];
    const size_t mark = ops_.mark();
    Tensor in = ops_.alloc(n, H, Use::matmul_input);
    ops_.gather_rows(h, r, in);
    const std::vector<Tensor> gu = ops_.alloc_products(n, gate_up);
    ops_.matmul(in, gate_up, gu);
    Tensor act = ops_.alloc(n, F, Use::matmul_input);
    ops_.glu(Glu::silu, gu[0], gu[1], act);
    Tensor out = ops_.alloc(n, H, Use::state);
    ops_.matmul(act, down, {&out, 1});
    ops_.scatter_add_rows(x, r, weights[static_cast<size_t>(e)], out);
    ops_.release(mark);
  }
}

Tensor LlamaModel::forward(const ForwardInputs& in) {
  const ModelConfig& c = config_;
  TensorOps& ops = ops_;
  const auto T = static_cast<int64_t>(in.tokens.size());
  const int64_t H = c.hidden, Q = c.q_dim(), F = c.ffn_hidden;
  const float eps = c.rms_norm_eps;
  // Scratch is taken once for every layer: on a GPU the addresses then stay
  // the same from step to step, as CUDA graphs need.
  Tensor x = ops.alloc(T, H, Use::state), h = ops.alloc(T, H, Use::matmul_input);
  Tensor attn = ops.alloc(T, Q, Use::matmul_input);
  const std::vector<Tensor> qkv = ops.alloc_products(T, layers_.front().qkv);
  std::vector<Tensor> gate_up;
  Tensor act;
  for (const Layer& L : layers_) {
    if (!L.experts.empty()) continue;
    gate_up = ops.alloc_products(T, L.gate_up);
    act = ops.alloc(T, F, Use::matmul_input);
    break;
  }
  // With sandwich norms a sublayer's output is normed before it joins the
  // residual stream, so it needs a buffer of its own.
  const Tensor branch = c.sandwich_norm ? ops.alloc(T, H, Use::state) : Tensor{};
  // x += in · w; with sandwich norms, x += norm(in · w).
  auto into_residual = [&](Tensor a, WeightId w, bool post_norms, VectorId post_norm, int32_t l, LoraTarget t) {
    if (!post_norms) {
      ops.matmul(a, w, {&x, 1}, /*accumulate=*/true);
      return adapt(in.lora, l, t, a, x);
    }
    ops.matmul(a, w, {&branch, 1});
    adapt(in.lora, l, t, a, branch);
    ops.rms_norm(branch, post_norm, eps, branch);
    ops.add(x, branch);
  };

  ops.embed(embedding_, in.tokens, x);
  if (c.embedding_scale != 1.0f) ops.scale(x, c.embedding_scale);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    const KvLayerView& kv = in.kv[static_cast<size_t>(l)];
    const bool sliding = c.layer_is_sliding(l);
    ops.rms_norm(x, L.attn_norm, eps, h);
    ops.matmul(h, L.qkv, qkv);
    const Tensor &q = qkv[0], &k = qkv[1], &v = qkv[2];
    adapt(in.lora, l, LoraTarget::q, h, q);
    adapt(in.lora, l, LoraTarget::k, h, k);
    adapt(in.lora, l, LoraTarget::v, h, v);
    if (L.bias) {
      ops.add_bias(q, L.bq);
      ops.add_bias(k, L.bk);
      ops.add_bias(v, L.bv);
    }
    if (L.has_q_norm) {  // each head on its own: the norm weight is one head wide
      ops.rms_norm(q, L.q_norm, eps, q);
      ops.rms_norm(k, L.k_norm, eps, k);
    }
    if (c.layer_has_rope(l)) ops.rope(q, c.n_heads, k, c.n_kv_heads, in.positions, sliding ? rope_sliding_ : rope_);
    ops.store_kv(kv, k, v, in.out_cache_loc);
    if (in.clock) in.clock->stored(l + 1);
    ops.attention(q, kv, *in.plan, LayerAttention{sliding ? c.sliding_window : 0, c.attn_softcap}, attn);
    into_residual(attn, L.wo, L.has_post_norms, L.post_attn_norm, l, LoraTarget::o);

    ops.rms_norm(x, L.ffn_norm, eps, h);
    if (!L.experts.empty()) {
      experts_into_residual(L, h, x);
      continue;
    }
    ops.matmul(h, L.gate_up, gate_up);
    adapt(in.lora, l, LoraTarget::gate, h, gate_up[0]);
    adapt(in.lora, l, LoraTarget::up, h, gate_up[1]);
    ops.glu(c.activation == ModelConfig::Activation::gelu_tanh ? Glu::gelu_tanh : Glu::silu, gate_up[0], gate_up[1],
            act);
    into_residual(act, L.down, L.has_post_norms, L.post_ffn_norm, l, LoraTarget::down);
  }

  // Only the rows that need logits go through the final norm and lm_head.
  const auto R = static_cast<int64_t>(in.logit_rows.size());
  Tensor picked = ops.alloc(R, H, Use::matmul_input);
  ops.rms_norm(x, output_norm_, eps, picked, in.logit_rows);
  Tensor logits = ops.alloc(R, c.vocab_size, Use::state);
  ops.matmul(picked, output_, {&logits, 1});
  adapt(in.lora, -1, LoraTarget::q, picked, logits);
  if (c.final_softcap > 0) ops.softcap(logits, c.final_softcap);
  return logits;
}

void LlamaModel::adapt(std::span<const LoraRows> lora, int32_t layer, LoraTarget target, Tensor x, Tensor out) {
  if (lora.empty()) return;
  // Every adapter's rows of a pass in one call: a step of many adapters
  // costs one parallel loop per matrix, not one per adapter. A call's
  // slices never share a row (rows are split among threads); a request's
  // stacked adapters go in later passes, in order.
  int32_t passes = 0;
  for (const LoraRows& seg : lora) passes = std::max(passes, seg.pass + 1);
  for (int32_t pass = 0; pass < passes; ++pass) {
    std::vector<LoraSlice> slices;
    for (const LoraRows& seg : lora) {
      if (seg.pass != pass) continue;
      const AdapterIds& ids = adapters_.at(seg.adapter);
      const LoraId id = layer < 0 ? ids.output : ids.layers[static_cast<size_t>(layer)][static_cast<size_t>(target)];
      if (!id.valid()) continue;
      if (layer < 0 && seg.logit_count > 0) {
        slices.push_back({id, seg.logit_begin, seg.logit_count, seg.scale});
      } else if (layer >= 0 && seg.rows > 0) {
        slices.push_back({id, seg.row_begin, seg.rows, seg.scale});
      }
    }
    if (!slices.empty()) ops_.lora(x, slices, out);
  }
}

void LlamaModel::add_adapter(int32_t id, const LoraAdapter& adapter) {
  if (id <= 0 || adapters_.count(id)) throw std::invalid_argument("LoRA adapter id " + std::to_string(id) + " is in use or not positive");
  if (adapter.layers.size() != layers_.size()) {
    throw std::invalid_argument("LoRA adapter " + adapter.path + " was made for " + std::to_string(adapter.layers.size()) +
                                " layers, the model has " + std::to_string(layers_.size()));
  }
  AdapterIds ids;
  ids.layers.resize(layers_.size());
  std::vector<LoraId> added;
  auto add = [&](const std::optional<LowRankMatrix>& m) {
    if (!m) return LoraId{};
    const LoraId lid = ops_.add_lora(m->a, m->b, m->rank, m->in, m->out, m->scale);
    added.push_back(lid);
    return lid;
  };
  try {
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (!layers_[l].experts.empty() && (adapter.layers[l][static_cast<size_t>(LoraTarget::gate)] ||
                                          adapter.layers[l][static_cast<size_t>(LoraTarget::up)] ||
                                          adapter.layers[l][static_cast<size_t>(LoraTarget::down)])) {
        throw std::invalid_argument("LoRA adapter " + adapter.path + " adapts the FFN of a mixture-of-experts layer");
      }
      for (size_t t = 0; t < kLoraTargets; ++t) ids.layers[l][t] = add(adapter.layers[l][t]);
    }
    ids.output = add(adapter.output);
  } catch (...) {
    for (LoraId lid : added) ops_.drop_lora(lid);
    throw;
  }
  adapters_.emplace(id, std::move(ids));
}

void LlamaModel::drop_adapter(int32_t id) {
  const auto it = adapters_.find(id);
  if (it == adapters_.end()) throw std::invalid_argument("no LoRA adapter " + std::to_string(id));
  for (const auto& layer : it->second.layers) {
    for (LoraId lid : layer) {
      if (lid.valid()) ops_.drop_lora(lid);
    }
  }
  if (it->second.output.valid()) ops_.drop_lora(it->second.output);
  adapters_.erase(it);
}

}  // namespace actorlm
