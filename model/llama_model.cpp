#include "model/llama_model.hpp"

#include <cmath>

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

LlamaModel::LlamaModel(LlamaWeights weights, Backend& backend)
    : weights_(std::move(weights)),
      backend_(backend),
      rope_(make_rope_table(weights_.config, weights_.rope_freq_factors)),
      rope_sliding_(make_rope_table(weights_.config, weights_.rope_freq_factors, /*sliding=*/true)) {
  for (const LayerWeights& L : weights_.layers) {
    LayerViews v{prepare(L.wq), prepare(L.wk), prepare(L.wv), prepare(L.wo), {}, {}, {}, {}, {}};
    if (L.experts.empty()) {
      v.gate = prepare(L.w_gate);
      v.up = prepare(L.w_up);
      v.down = prepare(L.w_down);
    } else {
      v.router = prepare(L.router);
      for (const auto& e : L.experts) v.experts.push_back({prepare(e.gate), prepare(e.up), prepare(e.down)});
    }
    layer_views_.push_back(std::move(v));
  }
  output_view_ = prepare(weights_.output());
}

MatrixView LlamaModel::prepare(const WeightMatrix& w) {
  PreparedMatrix p = backend_.prepare_weights(w.view());
  if (p.storage) prepared_storage_.push_back(std::move(p.storage));
  return p.view;
}

// Tokens are grouped by expert and each expert multiplies its rows as one
// batch; a token's outputs are added to x in expert order, so its result
// does not depend on which other tokens share the batch.
void LlamaModel::experts_into_residual(const LayerViews& M, const float* h, int64_t T, float* x) {
  const ModelConfig& c = weights_.config;
  const int64_t H = c.hidden, F = c.expert_ffn_hidden;
  const int32_t E = c.n_experts, K = c.n_experts_used;
  std::vector<float> logits(static_cast<size_t>(T * E));
  backend_.matmul(h, T, M.router, logits.data(), false);
  const std::vector<ExpertChoice> chosen =
      backend_.route_experts(logits.data(), T, E, K, /*normalize=*/true, c.expert_weights_scale);
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int32_t j = 0; j < K; ++j) {
      const ExpertChoice& ch = chosen[static_cast<size_t>(t * K + j)];
      rows[static_cast<size_t>(ch.expert)].push_back(static_cast<int32_t>(t));
      weights[static_cast<size_t>(ch.expert)].push_back(ch.weight);
    }
  }
  std::vector<float> in, gate, up, out;
  for (int32_t e = 0; e < E; ++e) {
    const auto& r = rows[static_cast<size_t>(e)];
    if (r.empty()) continue;
    const auto n = static_cast<int64_t>(r.size());
    in.resize(static_cast<size_t>(n * H));
    gate.resize(static_cast<size_t>(n * F));
    up.resize(static_cast<size_t>(n * F));
    out.resize(static_cast<size_t>(n * H));
    backend_.gather_rows(h, H, r, in.data());
    const auto& w = M.experts[static_cast<size_t>(e)];
    const MatrixView gate_up[] = {w[0], w[1]};
    float* const gate_up_out[] = {gate.data(), up.data()};
    backend_.matmul_many(in.data(), n, gate_up, gate_up_out);
    backend_.swiglu(gate.data(), up.data(), gate.data(), n * F);
    backend_.matmul(gate.data(), n, w[2], out.data(), false);
    backend_.scatter_add_rows(x, H, r, weights[static_cast<size_t>(e)], out.data());
  }
}

std::vector<float> LlamaModel::forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                       std::span<const int32_t> out_cache_loc, std::span<const KvLayerView> kv,
                                       const AttentionPlan& plan, std::span<const int32_t> logit_rows) {
  const ModelConfig& c = weights_.config;
  const auto T = static_cast<int64_t>(tokens.size());
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_hidden;
  std::vector<float> x(static_cast<size_t>(T * H)), h(static_cast<size_t>(T * H));
  std::vector<float> q(static_cast<size_t>(T * Q)), k(static_cast<size_t>(T * KV)), v(static_cast<size_t>(T * KV));
  std::vector<float> attn(static_cast<size_t>(T * Q));
  std::vector<float> gate(static_cast<size_t>(T * F)), up(static_cast<size_t>(T * F));
  // With sandwich norms a sublayer's output is normed before it joins the
  // residual stream, so it needs a buffer of its own.
  std::vector<float> branch(c.sandwich_norm ? static_cast<size_t>(T * H) : 0);

  // out (+)= in · w; with sandwich norms, x += norm(in · w).
  auto project_into_residual = [&](const float* in, const MatrixView& w, const std::vector<float>& post_norm) {
    if (post_norm.empty()) return backend_.matmul(in, T, w, x.data(), /*accumulate=*/true);
    backend_.matmul(in, T, w, branch.data(), false);
    backend_.rms_norm(branch.data(), post_norm.data(), branch.data(), T, H, c.rms_norm_eps);
    backend_.add(x.data(), branch.data(), T * H);
  };

  backend_.embed(weights_.token_embedding.view(), tokens, x.data());
  if (c.embedding_scale != 1.0f) backend_.scale(x.data(), T * H, c.embedding_scale);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    const LayerViews& M = layer_views_[static_cast<size_t>(l)];
    const bool sliding = c.layer_is_sliding(l);
    backend_.rms_norm(x.data(), L.attn_norm.data(), h.data(), T, H, c.rms_norm_eps);
    const MatrixView qkv[] = {M.wq, M.wk, M.wv};
    float* const qkv_out[] = {q.data(), k.data(), v.data()};
    backend_.matmul_many(h.data(), T, qkv, qkv_out);
    if (!L.bq.empty()) {
      backend_.add_bias(q.data(), L.bq.data(), T, Q);
      backend_.add_bias(k.data(), L.bk.data(), T, KV);
      backend_.add_bias(v.data(), L.bv.data(), T, KV);
    }
    if (!L.q_norm.empty()) {  // each head on its own
      backend_.rms_norm(q.data(), L.q_norm.data(), q.data(), T * c.n_heads, c.head_dim, c.rms_norm_eps);
      backend_.rms_norm(k.data(), L.k_norm.data(), k.data(), T * c.n_kv_heads, c.head_dim, c.rms_norm_eps);
    }
    if (c.layer_has_rope(l)) {
      backend_.rope(q.data(), c.n_heads, k.data(), c.n_kv_heads, positions, sliding ? rope_sliding_ : rope_);
    }
    backend_.store_kv(kv[static_cast<size_t>(l)], k.data(), v.data(), out_cache_loc);
    const LayerAttention options{sliding ? c.sliding_window : 0, c.attn_softcap};
    backend_.attention(q.data(), kv[static_cast<size_t>(l)], plan, options, attn.data());
    project_into_residual(attn.data(), M.wo, L.post_attn_norm);

    backend_.rms_norm(x.data(), L.ffn_norm.data(), h.data(), T, H, c.rms_norm_eps);
    if (!M.experts.empty()) {
      experts_into_residual(M, h.data(), T, x.data());
      continue;
    }
    const MatrixView gate_up[] = {M.gate, M.up};
    float* const gate_up_out[] = {gate.data(), up.data()};
    backend_.matmul_many(h.data(), T, gate_up, gate_up_out);
    if (c.activation == ModelConfig::Activation::gelu_tanh) {
      backend_.geglu(gate.data(), up.data(), gate.data(), T * F);
    } else {
      backend_.swiglu(gate.data(), up.data(), gate.data(), T * F);
    }
    project_into_residual(gate.data(), M.down, L.post_ffn_norm);
  }

  // Only the rows that need logits go through the final norm and lm_head.
  const auto R = static_cast<int64_t>(logit_rows.size());
  std::vector<float> picked(static_cast<size_t>(R * H));
  for (int64_t r = 0; r < R; ++r) {
    std::copy_n(x.data() + logit_rows[static_cast<size_t>(r)] * H, H, picked.data() + r * H);
  }
  backend_.rms_norm(picked.data(), weights_.output_norm.data(), picked.data(), R, H, c.rms_norm_eps);
  std::vector<float> logits(static_cast<size_t>(R * c.vocab_size));
  backend_.matmul(picked.data(), R, output_view_, logits.data(), false);
  if (c.final_softcap > 0) backend_.softcap(logits.data(), R * c.vocab_size, c.final_softcap);
  return logits;
}

}  // namespace actorlm
