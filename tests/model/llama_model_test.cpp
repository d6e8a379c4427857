// The whole forward pass against a dense reference written here in double
// precision, on tiny random models: every configuration knob the loaders can
// produce (GQA ratios, Qwen2 biases, tied or separate lm_head, Llama 3 RoPE
// scaling) run through the ModelRunner over a paged pool with shuffled rows,
// in prefill, prefix-extend and decode passes.
//
// Tolerance: |got - want| <= 1e-4 * (1 + |want|) per logit. The reference is
// float64 throughout; float32 accumulation over these short rows is ~1e-6.

#include "model/llama_model.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/model_runner.hpp"
#include "tests/model/model_test_support.hpp"
#include "tests/test_paths.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;
using D = std::vector<double>;

namespace {

struct TinyShape {
  int32_t n_heads = 6, n_kv_heads = 2;
  bool bias = false, tied = true, llama3 = false;
};

ModelConfig tiny_config(const TinyShape& s) {
  ModelConfig c;
  c.n_layers = 2;
  c.head_dim = 8;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.hidden = 48;
  c.ffn_hidden = 80;
  c.vocab_size = 64;
  c.max_context = 128;
  c.rope_theta = 10000.0f;
  c.rms_norm_eps = 1e-5f;
  c.tied_embeddings = s.tied;
  c.attention_bias = s.bias;
  if (s.llama3) {
    // With head_dim 8 the four pair wavelengths are 6.3, 63, 628 and 6283
    // positions: one kept, one blended, two stretched.
    c.rope_scaling = {RopeScaling::Kind::llama3, 4.0f, 1.0f, 4.0f, 64};
  }
  return c;
}

std::vector<float> randn(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

WeightMatrix mat(int64_t rows, int64_t cols, std::mt19937& rng) {
  return WeightMatrix::from_floats(rows, cols, randn(static_cast<size_t>(rows * cols), rng, 1.0f / std::sqrt(float(cols))));
}

LlamaWeights tiny_weights(const TinyShape& s, unsigned seed) {
  std::mt19937 rng(seed);
  LlamaWeights w;
  w.config = tiny_config(s);
  const ModelConfig& c = w.config;
  w.token_embedding = WeightMatrix::from_floats(c.vocab_size, c.hidden, randn(size_t(c.vocab_size * c.hidden), rng, 1.0f));
  auto norm = [&] {
    auto v = randn(size_t(c.hidden), rng, 0.2f);
    for (auto& x : v) x += 1.0f;
    return v;
  };
  w.output_norm = norm();
  if (!s.tied) w.lm_head = mat(c.vocab_size, c.hidden, rng);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    LayerWeights L;
    L.attn_norm = norm();
    L.wq = mat(c.q_dim(), c.hidden, rng);
    L.wk = mat(c.kv_dim(), c.hidden, rng);
    L.wv = mat(c.kv_dim(), c.hidden, rng);
    L.wo = mat(c.hidden, c.q_dim(), rng);
    if (s.bias) {
      L.bq = randn(size_t(c.q_dim()), rng, 0.5f);
      L.bk = randn(size_t(c.kv_dim()), rng, 0.5f);
      L.bv = randn(size_t(c.kv_dim()), rng, 0.5f);
    }
    L.ffn_norm = norm();
    L.w_gate = mat(c.ffn_hidden, c.hidden, rng);
    L.w_up = mat(c.ffn_hidden, c.hidden, rng);
    L.w_down = mat(c.hidden, c.ffn_hidden, rng);
    w.layers.push_back(std::move(L));
  }
  return w;
}

// ---------------------------------------------------------------- reference

// Hugging Face's rule for Llama 3 frequencies, written from its description:
// wavelengths above original_max / low_freq_factor are divided by factor,
// those below original_max / high_freq_factor kept, the band between
// interpolated linearly in original_max / wavelength.
std::vector<double> reference_inv_freq(const ModelConfig& c) {
  std::vector<double> f;
  for (int32_t i = 0; i < c.head_dim / 2; ++i) {
    double base = 1.0 / std::pow(double(c.rope_theta), double(2 * i) / c.head_dim);
    const RopeScaling& r = c.rope_scaling;
    if (r.kind == RopeScaling::Kind::llama3) {
      double wavelength = 2 * M_PI / base;
      double ratio = r.original_max_position / wavelength;
      if (ratio < r.low_freq_factor) {
        base /= r.factor;
      } else if (ratio <= r.high_freq_factor) {
        double t = (ratio - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        base = t * base + (1 - t) * base / r.factor;
      }
    }
    f.push_back(base);
  }
  return f;
}

D matvec(const WeightMatrix& w, const D& x) {
  const std::vector<float> values = w.to_float();
  D y(size_t(w.rows), 0.0);
  for (int64_t o = 0; o < w.rows; ++o) {
    for (int64_t i = 0; i < w.cols; ++i) y[size_t(o)] += double(values[size_t(o * w.cols + i)]) * x[size_t(i)];
  }
  return y;
}

D rms_norm(const D& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  double inv = 1 / std::sqrt(ss / double(x.size()) + eps);
  D y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// Logits after every token of seq, computing everything densely.
std::vector<D> reference_logits(const LlamaWeights& w, const Ids& seq) {
  const ModelConfig& c = w.config;
  const auto inv_freq = reference_inv_freq(c);
  const size_t T = seq.size(), hd = size_t(c.head_dim);
  std::vector<D> x(T);
  for (size_t t = 0; t < T; ++t) {
    std::vector<float> e(size_t(c.hidden));
    w.token_embedding.dequantize_rows(seq[t], seq[t] + 1, e.data());
    x[t].assign(e.begin(), e.end());
  }
  auto rotate = [&](D& v, int32_t heads, size_t pos) {
    for (int32_t h = 0; h < heads; ++h) {
      for (size_t i = 0; i < hd / 2; ++i) {
        double a = double(pos) * inv_freq[i], x0 = v[h * hd + 2 * i], x1 = v[h * hd + 2 * i + 1];
        v[h * hd + 2 * i] = x0 * std::cos(a) - x1 * std::sin(a);
        v[h * hd + 2 * i + 1] = x0 * std::sin(a) + x1 * std::cos(a);
      }
    }
  };
  for (const LayerWeights& L : w.layers) {
    std::vector<D> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      D h = rms_norm(x[t], L.attn_norm, c.rms_norm_eps);
      q[t] = matvec(L.wq, h);
      k[t] = matvec(L.wk, h);
      v[t] = matvec(L.wv, h);
      for (size_t i = 0; i < L.bq.size(); ++i) q[t][i] += L.bq[i];
      for (size_t i = 0; i < L.bk.size(); ++i) k[t][i] += L.bk[i];
      for (size_t i = 0; i < L.bv.size(); ++i) v[t][i] += L.bv[i];
      rotate(q[t], c.n_heads, t);
      rotate(k[t], c.n_kv_heads, t);
    }
    for (size_t t = 0; t < T; ++t) {
      D attn(size_t(c.q_dim()), 0.0);
      for (int32_t h = 0; h < c.n_heads; ++h) {
        size_t kvh = size_t(h / (c.n_heads / c.n_kv_heads));
        D s(t + 1);
        for (size_t p = 0; p <= t; ++p) {
          double d = 0;
          for (size_t e = 0; e < hd; ++e) d += q[t][h * hd + e] * k[p][kvh * hd + e];
          s[p] = d / std::sqrt(double(hd));
        }
        double mx = *std::max_element(s.begin(), s.end()), sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t p = 0; p <= t; ++p) {
          for (size_t e = 0; e < hd; ++e) attn[h * hd + e] += s[p] / sum * v[p][kvh * hd + e];
        }
      }
      D o = matvec(L.wo, attn);
      for (size_t i = 0; i < o.size(); ++i) x[t][i] += o[i];
      D h = rms_norm(x[t], L.ffn_norm, c.rms_norm_eps);
      D g = matvec(L.w_gate, h), u = matvec(L.w_up, h);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      D down = matvec(L.w_down, g);
      for (size_t i = 0; i < down.size(); ++i) x[t][i] += down[i];
    }
  }
  std::vector<D> logits;
  for (size_t t = 0; t < T; ++t) logits.push_back(matvec(w.output(), rms_norm(x[t], w.output_norm, c.rms_norm_eps)));
  return logits;
}

void require_logits_close(const float* got, const D& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("vocab entry " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-4 * (1 + std::abs(want[i])));
  }
}

}  // namespace

TEST_CASE("Forward over the paged pool equals a dense float64 reference", "[model][reference]") {
  auto [name, shape] = GENERATE(table<const char*, TinyShape>({
      {"MHA (GQA 1), tied", TinyShape{6, 6, false, true, false}},
      {"GQA 3, separate lm_head", TinyShape{6, 2, false, false, false}},
      {"GQA 6 (one KV head), Qwen2 biases", TinyShape{6, 1, true, true, false}},
      {"GQA 2, Llama 3 RoPE scaling", TinyShape{6, 3, false, false, true}},
  }));
  INFO(name);
  LlamaWeights w = tiny_weights(shape, 7);
  const int32_t vocab = w.config.vocab_size;
  std::mt19937 rng(11);
  Ids seq(45);
  for (auto& t : seq) t = int32_t(rng() % uint32_t(vocab));
  const auto want = reference_logits(w, seq);

  // KV rows: a random permutation of the pool (row 0 stays the dummy).
  const int64_t pool_rows = 200;
  Ids rows(pool_rows - 1);
  std::iota(rows.begin(), rows.end(), 1);
  std::shuffle(rows.begin(), rows.end(), rng);
  ModelRunner runner(std::move(w), std::make_unique<cpu::CpuBackend>(2),
                     {.kv_pool_rows = pool_rows, .max_requests = 2, .max_context = 64});

  // Prefill 17 tokens, extend 13 on that prefix, then decode one at a time.
  auto pass = [&](int32_t begin, int32_t end) {
    ForwardBatch b;
    b.reqs = {{1, begin, end - begin}};
    b.token_ids.assign(seq.begin() + begin, seq.begin() + end);
    b.out_cache_loc.assign(rows.begin() + begin, rows.begin() + end);
    b.writes = {{1, begin, b.out_cache_loc}};
    b.all_logits = true;
    ForwardOutput out = runner.forward(b);
    REQUIRE(out.rows() == size_t(end - begin));
    for (int32_t t = begin; t < end; ++t) {
      INFO("position " << t);
      require_logits_close(out.row(size_t(t - begin)), want[size_t(t)]);
    }
  };
  pass(0, 17);
  pass(17, 30);
  for (int32_t t = 30; t < int32_t(seq.size()); ++t) pass(t, t + 1);
}

TEST_CASE("RoPE frequencies: plain, Llama 3 scaled, and GGUF per-pair factors", "[model][rope]") {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  SECTION("no scaling is theta^(-2i/d)") {
    RopeTable t = make_rope_table(c, {});
    REQUIRE(t.inv_freq.size() == 64);
    REQUIRE(t.head_dim == 128);
    for (int i = 0; i < 64; ++i) CHECK(t.inv_freq[size_t(i)] == Approx(std::pow(500000.0, -i / 64.0)).epsilon(1e-6));
  }
  SECTION("Llama 3.1's scaling keeps short wavelengths, stretches long ones, blends between") {
    c.rope_scaling = {RopeScaling::Kind::llama3, 8.0f, 1.0f, 4.0f, 8192};
    RopeTable t = make_rope_table(c, {});
    auto want = reference_inv_freq(c);
    int kept = 0, stretched = 0, blended = 0;
    for (int i = 0; i < 64; ++i) {
      double plain = std::pow(500000.0, -i / 64.0);
      CHECK(t.inv_freq[size_t(i)] == Approx(want[size_t(i)]).epsilon(1e-6));
      if (std::abs(want[size_t(i)] - plain) < 1e-12 * plain) {
        ++kept;
      } else if (std::abs(want[size_t(i)] - plain / 8) < 1e-12 * plain) {
        ++stretched;
      } else {
        ++blended;
      }
    }
    // All three regimes occur for Llama 3.1's parameters.
    CHECK(kept > 0);
    CHECK(stretched > 0);
    CHECK(blended > 0);
  }
  SECTION("rope_freqs factors from a GGUF divide the plain frequencies and override the config") {
    c.rope_scaling = {RopeScaling::Kind::llama3, 8.0f, 1.0f, 4.0f, 8192};
    std::vector<float> factors(64);
    for (int i = 0; i < 64; ++i) factors[size_t(i)] = 1.0f + 0.1f * float(i);
    RopeTable t = make_rope_table(c, factors);
    for (int i = 0; i < 64; ++i) {
      CHECK(t.inv_freq[size_t(i)] == Approx(std::pow(500000.0, -i / 64.0) / factors[size_t(i)]).epsilon(1e-6));
    }
  }
}

// The default model's matrices are multiplied straight from their Q4_1 /
// Q8_0 blocks with int8 activations (kernels/cpu/quantized_matmul.hpp); a
// copy widened to float32 runs everything in sgemm/sgemv. Both are fed the
// float32 path's greedy tokens for 32 steps on 8 fixture prompts: the picks
// must agree at nearly every step and the logits stay close (measured:
// 249 of 256 picks, mean logit difference 0.18, largest 1.6; a wrong block layout or scale moves logits by whole units and
// the picks everywhere).
TEST_CASE("Products from weight blocks keep the float32 path's greedy tokens", "[model][quantized]") {
  LlamaWeights with_blocks = load_llama_weights(default_model_path());
  LlamaWeights float_only = with_blocks;
  int stripped = 0;
  auto strip = [&](WeightMatrix& m) {
    if (m.empty() || m.type == GgmlType::F32) return;
    ++stripped;
    m = WeightMatrix::from_floats(m.rows, m.cols, m.to_float());
  };
  strip(float_only.token_embedding);
  strip(float_only.lm_head);
  for (LayerWeights& L : float_only.layers) {
    for (WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) strip(*m);
  }
  REQUIRE(stripped == 1 + 7 * 30);
  const ModelRunnerConfig rc{.kv_pool_rows = 512, .max_requests = 1, .max_context = 256};
  ModelRunner blocks(std::move(with_blocks), std::make_unique<cpu::CpuBackend>(2), rc);
  ModelRunner floats(std::move(float_only), std::make_unique<cpu::CpuBackend>(2), rc);

  std::ifstream in(test::fixture_path("llamacpp/greedy.json"));
  REQUIRE(in);
  auto fx = nlohmann::json::parse(in);
  const int prompts = 8, steps = 32;
  double worst = 0, total = 0;
  int agree = 0;
  int64_t compared = 0;
  for (int c = 0; c < prompts; ++c) {
    const auto prompt = fx["cases"][size_t(c)]["prompt_ids"].get<Ids>();
    INFO("prompt: " << fx["cases"][size_t(c)]["prompt"].get<std::string>());
    Ids rows(prompt.size() + steps);
    std::iota(rows.begin(), rows.end(), 1);
    // The prefill, then one-token decode steps.
    auto a = test::run_request(blocks, 0, rows, 0, prompt);
    auto b = test::run_request(floats, 0, rows, 0, prompt);
    auto pos = static_cast<int32_t>(prompt.size());
    for (int i = 0; i < steps; ++i) {
      INFO("step " << i);
      const int32_t want = test::argmax(b.row(0), b.vocab);
      agree += test::argmax(a.row(0), a.vocab) == want ? 1 : 0;
      for (int32_t v = 0; v < a.vocab; ++v) {
        const double diff = std::abs(a.row(0)[v] - b.row(0)[v]);
        worst = std::max(worst, diff);
        total += diff;
        ++compared;
      }
      if (i + 1 == steps) break;
      a = test::run_request(blocks, 0, rows, pos, {want});
      b = test::run_request(floats, 0, rows, pos++, {want});
    }
  }
  const double mean = total / double(compared);
  std::printf("block path vs float32 over %d steps: %d picks agree, logit difference mean %.4f, largest %.4f\n",
              prompts * steps, agree, mean, worst);
  CHECK(worst > 0);  // the block path did run
  CHECK(agree >= prompts * steps * 95 / 100);
  CHECK(mean < 0.3);
  CHECK(worst < 3.0);
}
