// LoRA adapters (model/lora_adapter.hpp) in the layer loop: an adapter's
// products equal the base model with W + s·B·A merged into its weights, a
// batch mixing adapters and the base model gives every request its solo
// logits, and every malformed adapter file is refused by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <numeric>
#include <random>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "model/lora_adapter.hpp"
#include "model/model_runner.hpp"
#include "tests/model/gguf_builder.hpp"
#include "tests/model/lora_file.hpp"
#include "tests/model/model_test_support.hpp"
#include "tests/test_paths.hpp"

using namespace actorlm;
using actorlm::test::write_adapter;
using Ids = std::vector<int32_t>;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("actorlm_lora_" + name + ".gguf")).string();
}

// W + s·B·A as float32.
WeightMatrix merged(const WeightMatrix& w, const LowRankMatrix& m) {
  std::vector<float> v = w.to_float();
  for (int64_t o = 0; o < m.out; ++o) {
    for (int64_t i = 0; i < m.in; ++i) {
      double sum = 0;
      for (int32_t k = 0; k < m.rank; ++k) {
        sum += static_cast<double>(m.b[static_cast<size_t>(o * m.rank + k)]) * m.a[static_cast<size_t>(k * m.in + i)];
      }
      v[static_cast<size_t>(o * m.in + i)] += static_cast<float>(m.scale * sum);
    }
  }
  return WeightMatrix::from_floats(w.rows, w.cols, v);
}

// The model in `file` with every matrix of each adapter merged in, in order.
LlamaWeights merged_model(const std::string& file, std::initializer_list<const LoraAdapter*> adapters) {
  LlamaWeights w = load_llama_weights(file);
  for (const LoraAdapter* adapter : adapters) {
    for (size_t l = 0; l < w.layers.size(); ++l) {
      LayerWeights& L = w.layers[l];
      WeightMatrix* targets[] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
      for (size_t t = 0; t < 7; ++t) {
        if (const auto& m = adapter->layers[l][t]) *targets[t] = merged(*targets[t], *m);
      }
    }
    if (adapter->output) w.lm_head = merged(w.output(), *adapter->output);
  }
  return w;
}

// One request's whole-prompt pass (every row's logits), in rows 1...
ForwardOutput run_prompt(ModelRunner& r, const Ids& tokens, int32_t adapter, int32_t slot = 0, int32_t first_row = 1,
                         float scale = 1.0f, std::vector<std::pair<int32_t, float>> stacked = {}) {
  ForwardBatch b;
  ForwardRequest q{slot, 0, static_cast<int32_t>(tokens.size())};
  q.adapter = adapter;
  q.adapter_scale = scale;
  q.stacked_adapters = std::move(stacked);
  b.reqs.push_back(q);
  b.token_ids = tokens;
  b.out_cache_loc.resize(tokens.size());
  std::iota(b.out_cache_loc.begin(), b.out_cache_loc.end(), first_row);
  b.writes.push_back({slot, 0, b.out_cache_loc});
  b.all_logits = true;
  return r.forward(b);
}

double worst_relative(const ForwardOutput& a, const ForwardOutput& b) {
  double worst = 0, scale = 1e-3;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a.logits[i]) - b.logits[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b.logits[i])));
  }
  return worst / scale;
}

const Ids kPrompt{1, 45, 310, 77, 502, 9, 188, 260, 33, 599, 412, 5, 123, 76, 300, 18};

}  // namespace

TEST_CASE("An adapter's products equal the base model with W + s·B·A merged into its weights", "[model][lora]") {
  // The sandwich norms of gemma2 take the adapter's update before their norm.
  for (const std::string arch : {"llama", "qwen2", "gemma2"}) {
    DYNAMIC_SECTION(arch) {
      const std::string file = test::fixture_path("architectures/" + arch + ".gguf");
      LlamaWeights base = load_llama_weights(file);
      const ModelConfig c = base.config;
      const std::string path = temp_path(arch);
      write_adapter(path, c, {0, 1, 2, 3, 4, 5, 6}, 4, 6.0f, 7, /*output=*/!c.tied_embeddings);
      const LoraAdapter adapter = load_lora_adapter(path, c, 0.5f);
      CHECK(adapter.alpha == 6.0f);
      CHECK(adapter.matrices() == 7 * c.n_layers + (c.tied_embeddings ? 0 : 1));

      LlamaWeights merged_weights = merged_model(file, {&adapter});

      const ModelRunnerConfig rc{.kv_pool_rows = 128, .max_requests = 2, .max_context = 64};
      ModelRunner with(std::move(base), std::make_unique<cpu::CpuBackend>(2), rc);
      ModelRunner want(std::move(merged_weights), std::make_unique<cpu::CpuBackend>(2), rc);
      with.add_adapter(3, adapter);
      CHECK(with.adapter_bytes() == adapter.bytes());

      const ForwardOutput adapted = run_prompt(with, kPrompt, 3);
      const ForwardOutput reference = run_prompt(want, kPrompt, 0);
      const ForwardOutput plain = run_prompt(with, kPrompt, 0);
      INFO("worst gap " << worst_relative(adapted, reference));
      CHECK(worst_relative(adapted, reference) < 1e-4);
      // The adapter matters: without it the logits are far from the merged model's.
      CHECK(worst_relative(plain, reference) > 1e-2);

      // A request's own scale multiplies the one it was loaded with: at
      // -1.5 it is the model with W - 0.75·(alpha/rank)·B·A merged in.
      {
        const LoraAdapter rescaled = load_lora_adapter(path, c, 0.5f * -1.5f);
        ModelRunner scaled_want(merged_model(file, {&rescaled}), std::make_unique<cpu::CpuBackend>(2), rc);
        const ForwardOutput scaled = run_prompt(with, kPrompt, 3, 0, 1, -1.5f);
        const ForwardOutput scaled_reference = run_prompt(scaled_want, kPrompt, 0);
        INFO("worst gap at scale -1.5 " << worst_relative(scaled, scaled_reference));
        CHECK(worst_relative(scaled, scaled_reference) < 1e-4);
        CHECK(worst_relative(scaled, reference) > 1e-2);
      }
      // Stacked adapters (llama-server's list naming several): the first at
      // its scale, then a second adapting other matrices and some of the
      // same, at 0.7: both merged in.
      {
        const std::string path2 = temp_path(arch + "_second");
        write_adapter(path2, c, {0, 2, 5}, 2, 4.0f, 9, false);
        const LoraAdapter second = load_lora_adapter(path2, c);
        with.add_adapter(4, second);
        const LoraAdapter second_scaled = load_lora_adapter(path2, c, 0.7f);
        ModelRunner both_want(merged_model(file, {&adapter, &second_scaled}), std::make_unique<cpu::CpuBackend>(2), rc);
        const ForwardOutput stacked = run_prompt(with, kPrompt, 3, 0, 1, 1.0f, {{4, 0.7f}});
        const ForwardOutput both_reference = run_prompt(both_want, kPrompt, 0);
        INFO("worst gap with two adapters " << worst_relative(stacked, both_reference));
        CHECK(worst_relative(stacked, both_reference) < 1e-4);
        CHECK(worst_relative(stacked, reference) > 1e-3);
        with.drop_adapter(4);
        std::filesystem::remove(path2);
      }

      with.drop_adapter(3);
      CHECK(with.adapter_bytes() == 0);
      CHECK_THROWS_WITH(run_prompt(with, kPrompt, 3), Catch::Contains("no LoRA adapter 3 is loaded"));
      std::filesystem::remove(path);
    }
  }
}

TEST_CASE("A batch mixing two adapters and the base model gives each request its solo logits", "[model][lora]") {
  ModelRunner& r = test::default_runner();
  const ModelConfig& c = r.model_config();
  const std::string pa = temp_path("a"), pb = temp_path("b");
  write_adapter(pa, c, {0, 2, 6}, 8, 16.0f, 11, false, 0.3f);
  write_adapter(pb, c, {1, 3, 4, 5}, 4, 0.0f, 12, false, 0.05f);
  r.add_adapter(1, load_lora_adapter(pa, c));
  r.add_adapter(2, load_lora_adapter(pb, c, 0.8f));
  const int32_t vocab = c.vocab_size;

  const Ids p1(kPrompt.begin(), kPrompt.begin() + 12), p2(kPrompt.begin() + 3, kPrompt.end());
  // Solo references: the last position's logits of each request alone.
  auto last_row = [&](const ForwardOutput& out) {
    return std::vector<float>(out.row(out.rows() - 1), out.row(out.rows() - 1) + vocab);
  };
  const auto a1 = last_row(run_prompt(r, p1, 1, 0, 100));
  const auto base1 = last_row(run_prompt(r, p1, 0, 0, 100));
  const auto b2 = last_row(run_prompt(r, p2, 2, 1, 200));
  const auto a2 = last_row(run_prompt(r, p2, 1, 1, 200));
  const auto a2_half = last_row(run_prompt(r, p2, 1, 1, 200, 0.5f));
  CHECK(a2_half != a2);
  const auto b1_then_a = last_row(run_prompt(r, p1, 2, 0, 100, 1.0f, {{1, -1.0f}}));
  // The adapters change the model's output.
  CHECK(test::argmax(a1.data(), vocab) != test::argmax(base1.data(), vocab));

  // All six in one batch, in other slots and rows: adapter 1, none,
  // adapter 2, adapter 1, adapter 1 at half its scale (neighbours with the
  // same adapter at another scale are not one segment), adapter 2 with 1
  // stacked on it (its second pass beside the others' first).
  ForwardBatch b;
  struct Req {
    const Ids* prompt;
    int32_t adapter;
    float scale;
    std::vector<std::pair<int32_t, float>> stacked;
  };
  const std::vector<Req> reqs{{&p1, 1, 1, {}},   {&p1, 0, 1, {}},    {&p2, 2, 1, {}},
                              {&p2, 1, 1, {}},   {&p2, 1, 0.5f, {}}, {&p1, 2, 1, {{1, -1.0f}}}};
  int32_t row = 300;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Ids& p = *reqs[i].prompt;
    ForwardRequest q{static_cast<int32_t>(2 + i), 0, static_cast<int32_t>(p.size())};
    q.adapter = reqs[i].adapter;
    q.adapter_scale = reqs[i].scale;
    q.stacked_adapters = reqs[i].stacked;
    b.reqs.push_back(q);
    b.token_ids.insert(b.token_ids.end(), p.begin(), p.end());
    Ids rows(p.size());
    std::iota(rows.begin(), rows.end(), row);
    row += 50;
    b.out_cache_loc.insert(b.out_cache_loc.end(), rows.begin(), rows.end());
    b.writes.push_back({q.slot, 0, rows});
  }
  const ForwardOutput out = r.forward(b);
  REQUIRE(out.rows() == 6);
  const std::vector<const std::vector<float>*> want{&a1, &base1, &b2, &a2, &a2_half, &b1_then_a};
  for (size_t i = 0; i < 6; ++i) {
    float worst = 0;
    for (int32_t t = 0; t < vocab; ++t) worst = std::max(worst, std::abs(out.row(i)[t] - (*want[i])[static_cast<size_t>(t)]));
    INFO("request " << i);
    CHECK(worst == 0.0f);  // each row's sums are taken alike whatever its batch
  }
  r.drop_adapter(1);
  r.drop_adapter(2);
  CHECK(r.adapter_bytes() == 0);
  std::filesystem::remove(pa);
  std::filesystem::remove(pb);
}

TEST_CASE("An adapter file that does not fit the model is refused by name", "[model][lora]") {
  const ModelConfig c = test::default_runner().model_config();
  const std::string path = temp_path("bad");
  auto refused = [&](const test::GgufBuilder& g, const std::string& why) {
    g.write(path);
    INFO(why);
    CHECK_THROWS_WITH(load_lora_adapter(path, c), Catch::Contains(why));
  };
  auto header = [&](const std::string& type = "adapter", const std::string& kind = "lora",
                    const std::string& arch = "llama") {
    test::GgufBuilder g;
    g.str("general.architecture", arch).str("general.type", type).str("adapter.type", kind);
    g.f32("adapter.lora.alpha", 8.0f);
    return g;
  };
  const int64_t H = c.hidden, Q = c.q_dim();
  auto pair = [&](test::GgufBuilder& g, const std::string& name, uint64_t in, uint64_t rank, uint64_t rank_b,
                  uint64_t out) {
    g.f32_tensor(name + ".lora_a", {in, rank}, std::vector<float>(in * rank, 0.01f));
    g.f32_tensor(name + ".lora_b", {rank_b, out}, std::vector<float>(rank_b * out, 0.01f));
  };
  const auto uH = static_cast<uint64_t>(H), uQ = static_cast<uint64_t>(Q);
  {
    auto g = header("model");
    pair(g, "blk.0.attn_q.weight", uH, 4, 4, uQ);
    refused(g, "general.type is 'model', not 'adapter'");
  }
  {
    auto g = header("adapter", "ia3");
    pair(g, "blk.0.attn_q.weight", uH, 4, 4, uQ);
    refused(g, "adapter.type is 'ia3', not 'lora'");
  }
  {
    auto g = header("adapter", "lora", "qwen2");
    pair(g, "blk.0.attn_q.weight", uH, 4, 4, uQ);
    refused(g, "an adapter for architecture 'qwen2', the model is 'llama'");
  }
  refused(header(), "the adapter has no tensors");
  {
    auto g = header();
    g.f32_tensor("blk.0.attn_q.weight.lora_a", {uH, 4}, std::vector<float>(H * 4, 0.0f));
    refused(g, "blk.0.attn_q.weight is missing its lora_b");
  }
  {
    auto g = header();
    g.f32_tensor("blk.0.attn_q.weight", {uH, uQ}, std::vector<float>(H * Q, 0.0f));
    refused(g, "is neither a .lora_a nor a .lora_b half");
  }
  {
    auto g = header();
    pair(g, "token_embd.weight", 4, uH, 4, static_cast<uint64_t>(c.vocab_size));
    refused(g, "adapting the token embedding is not supported");
  }
  {
    auto g = header();
    pair(g, "output.weight", uH, 4, 4, static_cast<uint64_t>(c.vocab_size));
    refused(g, "the base model has no output.weight");  // SmolLM2 ties its head to the embedding
  }
  {
    auto g = header();
    pair(g, "blk.30.attn_q.weight", uH, 4, 4, uQ);
    refused(g, "the base model has 30 layers");
  }
  {
    auto g = header();
    pair(g, "blk.0.attn_qkv.weight", uH, 4, 4, uQ);
    refused(g, "fused matrices are not supported");
  }
  {
    auto g = header();
    pair(g, "blk.0.attn_norm.weight", uH, 4, 4, uQ);
    refused(g, "no adapter support for this matrix");
  }
  {
    auto g = header();
    pair(g, "blk.0.attn_q.weight", uH + 1, 4, 4, uQ);
    refused(g, "has shapes that do not fit the base matrix");
  }
  {
    auto g = header();
    pair(g, "blk.0.attn_q.weight", uH, 4, 5, uQ);  // ranks disagree
    refused(g, "has shapes that do not fit the base matrix");
  }
  {
    auto g = header();
    pair(g, "blk.0.attn_q.weight", uH, 4, 4, uQ + 2);
    refused(g, "has shapes that do not fit the base matrix");
  }
  CHECK_THROWS_WITH(load_lora_adapter(path, c, std::nanf("")), Catch::Contains("finite"));
  std::filesystem::remove(path);
  CHECK_THROWS_AS(load_lora_adapter(path, c), ModelError);  // no such file
}

TEST_CASE("The runner refuses adapter ids in use, unknown ids and batches naming an adapter it lacks",
          "[model][lora]") {
  ModelRunner& r = test::default_runner();
  const ModelConfig& c = r.model_config();
  const std::string path = temp_path("ids");
  write_adapter(path, c, {0}, 2, 0.0f, 5);
  const LoraAdapter adapter = load_lora_adapter(path, c);
  CHECK_THROWS_WITH(r.add_adapter(0, adapter), Catch::Contains("not positive"));
  r.add_adapter(7, adapter);
  CHECK(r.has_adapter(7));
  CHECK_THROWS_WITH(r.add_adapter(7, adapter), Catch::Contains("in use"));
  CHECK_THROWS_WITH(r.drop_adapter(8), Catch::Contains("no LoRA adapter 8"));
  CHECK_THROWS_WITH(run_prompt(r, {1, 2, 3}, 9), Catch::Contains("no LoRA adapter 9 is loaded"));
  r.drop_adapter(7);
  CHECK_FALSE(r.has_adapter(7));
  std::filesystem::remove(path);
}
