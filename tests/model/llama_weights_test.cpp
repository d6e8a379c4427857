#include "model/llama_weights.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>

#include "model/gguf_file.hpp"
#include "model/safetensors_file.hpp"
#include "tests/model/model_test_support.hpp"

using namespace actorlm;
namespace fs = std::filesystem;
using V = std::vector<float>;

namespace {

// A tiny random Llama in Hugging Face layout (q/k rows in HF's half-split
// RoPE order), with an independent reference forward in HF's convention.
struct TinyHf {
  int L = 2, H = 16, NH = 4, NKV = 2, HD = 4, F = 24, VOCAB = 40;
  float theta = 10000.0f, eps = 1e-5f;
  std::map<std::string, V> w;

  explicit TinyHf(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.4f);
    auto make = [&](const std::string& name, size_t n, float base = 0.0f) {
      V v(n);
      for (auto& x : v) x = base + d(rng);
      w[name] = v;
    };
    make("model.embed_tokens.weight", size_t(VOCAB * H));
    make("model.norm.weight", size_t(H), 1.0f);
    make("lm_head.weight", size_t(VOCAB * H));
    for (int l = 0; l < L; ++l) {
      std::string p = "model.layers." + std::to_string(l) + ".";
      make(p + "input_layernorm.weight", size_t(H), 1.0f);
      make(p + "self_attn.q_proj.weight", size_t(NH * HD * H));
      make(p + "self_attn.k_proj.weight", size_t(NKV * HD * H));
      make(p + "self_attn.v_proj.weight", size_t(NKV * HD * H));
      make(p + "self_attn.o_proj.weight", size_t(H * NH * HD));
      make(p + "post_attention_layernorm.weight", size_t(H), 1.0f);
      make(p + "mlp.gate_proj.weight", size_t(F * H));
      make(p + "mlp.up_proj.weight", size_t(F * H));
      make(p + "mlp.down_proj.weight", size_t(H * F));
    }
  }

  std::vector<int64_t> shape_of(const std::string& name) const {
    size_t n = w.at(name).size();
    if (name.find("norm") != std::string::npos) return {int64_t(n)};
    int64_t cols = name.find("down_proj") != std::string::npos ? F
                   : name.find("o_proj") != std::string::npos ? NH * HD : H;
    return {int64_t(n) / cols, cols};
  }

  void save(const std::string& dir, const std::string& dtype) const {
    fs::create_directories(dir);
    std::ofstream(dir + "/config.json")
        << "{\"model_type\":\"llama\",\"num_hidden_layers\":" << L << ",\"hidden_size\":" << H
        << ",\"num_attention_heads\":" << NH << ",\"num_key_value_heads\":" << NKV
        << ",\"intermediate_size\":" << F << ",\"vocab_size\":" << VOCAB
        << ",\"max_position_embeddings\":64,\"rope_theta\":" << theta << ",\"rms_norm_eps\":" << eps
        << ",\"tie_word_embeddings\":false}";
    std::vector<SafetensorsWriteEntry> entries;
    for (const auto& [name, v] : w) entries.push_back({name, dtype, shape_of(name), v});
    write_safetensors(dir + "/model.safetensors", entries);
  }

  // out[rows][cols_out] = x[rows][in] * W^T
  static V mm(const V& x, const V& W, int rows, int in, int out) {
    V y(size_t(rows * out));
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out; ++o) {
        double s = 0;
        for (int i = 0; i < in; ++i) s += double(x[size_t(r * in + i)]) * W[size_t(o * in + i)];
        y[size_t(r * out + o)] = float(s);
      }
    return y;
  }
  V norm(const V& x, const V& g, int rows) const {
    V y(x.size());
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < H; ++i) ss += double(x[size_t(r * H + i)]) * x[size_t(r * H + i)];
      double inv = 1 / std::sqrt(ss / H + eps);
      for (int i = 0; i < H; ++i) y[size_t(r * H + i)] = float(x[size_t(r * H + i)] * inv * g[size_t(i)]);
    }
    return y;
  }
  // HF rotate_half: pairs (i, i + HD/2).
  void rope(V& x, int rows, int heads) const {
    for (int t = 0; t < rows; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < HD / 2; ++i) {
          double f = std::pow(double(theta), -2.0 * i / HD), a = t * f;
          float& x0 = x[size_t((t * heads + h) * HD + i)];
          float& x1 = x[size_t((t * heads + h) * HD + i + HD / 2)];
          float r0 = float(x0 * std::cos(a) - x1 * std::sin(a)), r1 = float(x1 * std::cos(a) + x0 * std::sin(a));
          x0 = r0;
          x1 = r1;
        }
  }
  // Logits of the last token of `tokens`.
  V forward(const std::vector<int32_t>& tokens) const {
    int T = int(tokens.size());
    V x(size_t(T * H));
    for (int t = 0; t < T; ++t)
      std::copy_n(w.at("model.embed_tokens.weight").begin() + tokens[size_t(t)] * H, H, x.begin() + t * H);
    for (int l = 0; l < L; ++l) {
      std::string p = "model.layers." + std::to_string(l) + ".";
      V h = norm(x, w.at(p + "input_layernorm.weight"), T);
      V q = mm(h, w.at(p + "self_attn.q_proj.weight"), T, H, NH * HD);
      V k = mm(h, w.at(p + "self_attn.k_proj.weight"), T, H, NKV * HD);
      V v = mm(h, w.at(p + "self_attn.v_proj.weight"), T, H, NKV * HD);
      rope(q, T, NH);
      rope(k, T, NKV);
      V att(size_t(T * NH * HD), 0.0f);
      for (int t = 0; t < T; ++t)
        for (int hh = 0; hh < NH; ++hh) {
          int kv = hh / (NH / NKV);
          std::vector<double> s(size_t(t + 1));
          double mx = -1e300, sum = 0;
          for (int u = 0; u <= t; ++u) {
            double d = 0;
            for (int e = 0; e < HD; ++e) d += double(q[size_t((t * NH + hh) * HD + e)]) * k[size_t((u * NKV + kv) * HD + e)];
            s[size_t(u)] = d / std::sqrt(double(HD));
            mx = std::max(mx, s[size_t(u)]);
          }
          for (auto& z : s) sum += (z = std::exp(z - mx));
          for (int e = 0; e < HD; ++e) {
            double acc = 0;
            for (int u = 0; u <= t; ++u) acc += s[size_t(u)] * v[size_t((u * NKV + kv) * HD + e)];
            att[size_t((t * NH + hh) * HD + e)] = float(acc / sum);
          }
        }
      V o = mm(att, w.at(p + "self_attn.o_proj.weight"), T, NH * HD, H);
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      h = norm(x, w.at(p + "post_attention_layernorm.weight"), T);
      V g = mm(h, w.at(p + "mlp.gate_proj.weight"), T, H, F), u = mm(h, w.at(p + "mlp.up_proj.weight"), T, H, F);
      for (size_t i = 0; i < g.size(); ++i) g[i] = float(g[i] / (1 + std::exp(-double(g[i]))) * u[i]);
      V dn = mm(g, w.at(p + "mlp.down_proj.weight"), T, F, H);
      for (size_t i = 0; i < x.size(); ++i) x[i] += dn[i];
    }
    V last(x.end() - H, x.end());
    last = norm(last, w.at("model.norm.weight"), 1);
    return mm(last, w.at("lm_head.weight"), 1, H, VOCAB);
  }
};

std::string temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("actorlm_test_" + name);
  fs::remove_all(d);
  return d.string();
}

}  // namespace

TEST_CASE("The default GGUF loads with the shapes of its config", "[model][weights]") {
  int last_done = 0, total = 0;
  LlamaWeights w = load_llama_weights(default_model_path(), [&](int done, int t) {
    CHECK(done == last_done + 1);
    last_done = done;
    total = t;
  });
  CHECK(last_done == total);
  const ModelConfig& c = w.config;
  CHECK(w.layers.size() == 30);
  CHECK(w.token_embedding.rows == 49152);
  CHECK(w.token_embedding.cols == 576);
  CHECK(w.lm_head.empty());  // tied
  CHECK(&w.output() == &w.token_embedding);
  CHECK(w.layers[0].wq.rows == c.q_dim());
  CHECK(w.layers[0].wk.rows == c.kv_dim());
  CHECK(w.layers[29].w_down.cols == c.ffn_hidden);
  CHECK(w.layers[0].wq.type == GgmlType::Q4_1);

  // GGUF matrices are views of the file's bytes, not copies: each points at
  // its tensor's data inside the mapping, in the file's own format.
  GgufFile file = GgufFile::open(default_model_path());
  const std::pair<const WeightMatrix*, const char*> checked[] = {{&w.token_embedding, "token_embd.weight"},
                                                                 {&w.layers[0].wq, "blk.0.attn_q.weight"},
                                                                 {&w.layers[29].w_down, "blk.29.ffn_down.weight"}};
  for (const auto& [m, name] : checked) {
    INFO(name);
    const GgufTensorInfo& t = file.tensor(name);
    CHECK(m->type == t.type);
    REQUIRE(size_t(m->rows) * m->row_bytes() == t.byte_size);
    // Two mappings of one file: equal bytes at the same offset from the start of the tensor data.
    CHECK(std::memcmp(m->bytes.get(), t.data, t.byte_size) == 0);
    CHECK(m->bytes.get() != t.data);  // w's own mapping, alive after the loader's GgufFile closed
  }
  // Sharing, not copying: the matrices of a copied LlamaWeights point at the same bytes.
  LlamaWeights copy = w;
  CHECK(copy.layers[3].w_up.bytes.get() == w.layers[3].w_up.bytes.get());
}

TEST_CASE("permute_rope_rows moves a quantized matrix's rows whole", "[model][weights]") {
  // 8 rows of 64 Q8_0 values (2 blocks of 34 bytes), 2 heads of 4 rows.
  std::mt19937 rng(5);
  const int64_t rows = 8, cols = 64;
  const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, cols);
  auto raw = std::make_shared<std::vector<uint8_t>>(rows * row_bytes);
  for (auto& b : *raw) b = uint8_t(rng());
  for (size_t i = 0; i < raw->size(); i += 34) (*raw)[i + 1] = 0x3c;  // scale near 1, finite
  WeightMatrix m{rows, cols, GgmlType::Q8_0, std::shared_ptr<const uint8_t>(raw, raw->data())};
  const V before = m.to_float();

  permute_rope_rows(m, 2);
  CHECK(m.type == GgmlType::Q8_0);
  CHECK(m.bytes.get() != raw->data());  // a permuted copy; the original is untouched
  CHECK(m.to_float() == permute_rope_rows(before, rows, cols, 2));
}

TEST_CASE("A Hugging Face checkpoint gives the logits of a reference forward in HF's convention",
          "[model][weights][hf]") {
  std::string dtype = GENERATE(as<std::string>{}, "F32", "BF16");
  TinyHf tiny(7);
  if (dtype == "BF16") {  // the reference must use the rounded weights too
    for (auto& [name, v] : tiny.w) {
      SafetensorsWriteEntry e{name, "BF16", {int64_t(v.size())}, v};
      std::string f = temp_dir("bf16_round");
      fs::create_directories(f);
      write_safetensors(f + "/t.safetensors", {e});
      auto file = SafetensorsFile::open(f + "/t.safetensors");
      v = file.read_f32(file.tensors()[0]);
    }
  }
  std::string dir = temp_dir("tiny_hf_" + dtype);
  tiny.save(dir, dtype);
  ModelRunner runner(load_llama_weights(dir), std::make_unique<cpu::CpuBackend>(1),
                     {.kv_pool_rows = 64, .max_requests = 2, .max_context = 64});
  std::vector<int32_t> tokens{3, 17, 5, 39, 0, 22, 8};
  std::vector<int32_t> rows(tokens.size());
  std::iota(rows.begin(), rows.end(), 1);
  auto got = test::run_request(runner, 0, rows, 0, tokens);
  V want = tiny.forward(tokens);
  for (int i = 0; i < tiny.VOCAB; ++i) REQUIRE(got.row(0)[i] == Approx(want[size_t(i)]).margin(1e-4));
}

TEST_CASE("Missing tensors, wrong shapes and bad files are named", "[model][weights]") {
  TinyHf tiny(8);
  std::string dir = temp_dir("broken_hf");
  tiny.w.erase("model.layers.1.mlp.up_proj.weight");
  tiny.save(dir, "F32");
  try {
    load_llama_weights(dir);
    FAIL("loaded");
  } catch (const ModelError& e) {
    CHECK(std::string(e.what()).find("model.layers.1.mlp.up_proj.weight") != std::string::npos);
  }
  TinyHf wrong(9);
  wrong.w["model.norm.weight"].push_back(1.0f);  // 17 instead of 16
  dir = temp_dir("shape_hf");
  wrong.save(dir, "F32");
  try {
    load_llama_weights(dir);
    FAIL("loaded");
  } catch (const ModelError& e) {
    CHECK(std::string(e.what()).find("model.norm.weight has shape") != std::string::npos);
  }
  CHECK_THROWS_AS(load_llama_weights("/nonexistent/model.gguf"), ModelError);
}

TEST_CASE("safetensors round trip and corrupt headers", "[model][safetensors]") {
  std::string dir = temp_dir("st");
  fs::create_directories(dir);
  V vals{1.0f, -2.5f, 0.333f, 65504.0f, 1e-8f, 0.0f};
  write_safetensors(dir + "/a.safetensors", {{"f32", "F32", {2, 3}, vals}, {"f16", "F16", {6}, vals},
                                             {"bf16", "BF16", {3, 2}, vals}});
  auto f = SafetensorsFile::open(dir + "/a.safetensors");
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.read_f32(*f.find("f32")) == vals);
  auto h = f.read_f32(*f.find("f16"));
  for (size_t i = 0; i < vals.size(); ++i) CHECK(h[i] == Approx(vals[i]).epsilon(1e-3).margin(1e-7));
  auto b = f.read_f32(*f.find("bf16"));
  for (size_t i = 0; i < vals.size(); ++i) CHECK(b[i] == Approx(vals[i]).epsilon(1e-2).margin(1e-8));
  CHECK(f.find("f16")->shape == std::vector<int64_t>{6});

  std::ofstream(dir + "/bad.safetensors", std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0{not json!!}xxxx", 24);
  try {
    SafetensorsFile::open(dir + "/bad.safetensors");
    FAIL("opened");
  } catch (const ModelError& e) {
    CHECK(std::string(e.what()).find("bad.safetensors") != std::string::npos);
  }
  std::ofstream(dir + "/huge.safetensors", std::ios::binary) << std::string("\xff\xff\xff\xff\0\0\0\0{}", 10);
  CHECK_THROWS_AS(SafetensorsFile::open(dir + "/huge.safetensors"), ModelError);
}

TEST_CASE("Inconsistent configs are rejected", "[model][config]") {
  std::string dir = temp_dir("cfg");
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"num_hidden_layers":2,"hidden_size":16,"num_attention_heads":4,
    "num_key_value_heads":3,"intermediate_size":8,"vocab_size":10})";
  try {
    config_from_hf_json(dir + "/config.json");
    FAIL("accepted");
  } catch (const ModelError& e) {
    CHECK(std::string(e.what()).find("not a multiple of n_kv_heads") != std::string::npos);
  }
  std::ofstream(dir + "/config.json") << "{ this is not json";
  CHECK_THROWS_AS(config_from_hf_json(dir + "/config.json"), ModelError);
  std::ofstream(dir + "/config.json") << R"({"model_type":"mamba"})";
  CHECK_THROWS_AS(config_from_hf_json(dir + "/config.json"), ModelError);
}

TEST_CASE("Llama 3 RoPE scaling stretches only the long wavelengths", "[model][config]") {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  c.rope_scaling.kind = RopeScaling::Kind::llama3;
  c.rope_scaling.factor = 8.0f;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_max_position = 8192;
  RopeTable scaled = make_rope_table(c, {});
  c.rope_scaling.kind = RopeScaling::Kind::none;
  RopeTable plain = make_rope_table(c, {});
  CHECK(scaled.inv_freq.front() == plain.inv_freq.front());                          // short wavelength kept
  CHECK(scaled.inv_freq.back() == Approx(plain.inv_freq.back() / 8.0f).epsilon(1e-6));  // long: / factor
  for (size_t i = 0; i < plain.inv_freq.size(); ++i) {
    CHECK(scaled.inv_freq[i] <= plain.inv_freq[i]);
    CHECK(scaled.inv_freq[i] >= plain.inv_freq[i] / 8.0f * (1 - 1e-6f));
  }
}
