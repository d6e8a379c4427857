// The CUDA executor as a whole: the default model against the CPU backend,
// paged prefix reuse on the device, and a random Llama against Hugging Face
// transformers on the same GPU (scripts/gpu/hf_reference.py writes it).
// Figures are printed so a passing run still shows how close it was.

#include "executor/cuda_executor.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/gguf_file.hpp"
#include "tests/model/model_test_support.hpp"
#include "tests/test_paths.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

const LlamaWeights& default_weights() {
  static LlamaWeights w = load_llama_weights(default_model_path());
  return w;
}

std::unique_ptr<ModelRunner> cuda_runner(const LlamaWeights& w, int64_t rows = 8192, int32_t ctx = 1024) {
  return std::make_unique<ModelRunner>(cuda::CudaExecutor::create(w),
                                       ModelRunnerConfig{.kv_pool_rows = rows, .max_requests = 8, .max_context = ctx});
}

// The same weights dequantized to float32 once: the CPU backend then runs
// them through float32 GEMMs. On the file's own blocks it quantizes each
// activation row to 8 bits first, as llama.cpp does, which moves logits by
// more than the GPU's bf16 rounding does: a float reference tells a CUDA
// error from that (measured on an H200, the same for the code before the
// shared layer loop: worst row 0.194 against the file's blocks).
const LlamaWeights& float_default_weights() {
  static LlamaWeights w = [] {
    LlamaWeights f = default_weights();
    auto widen = [](WeightMatrix& m) {
      if (!m.empty()) m = WeightMatrix::from_floats(m.rows, m.cols, m.to_float());
    };
    widen(f.token_embedding);
    widen(f.lm_head);
    for (LayerWeights& L : f.layers) {
      for (WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) widen(*m);
    }
    return f;
  }();
  return w;
}

std::unique_ptr<ModelRunner> cpu_runner(const LlamaWeights& w) {
  return std::make_unique<ModelRunner>(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(0),
                                       ModelRunnerConfig{.kv_pool_rows = 8192, .max_requests = 8, .max_context = 1024});
}

// Greedy through the runner's own sampler (on the GPU for a CUDA runner).
Ids greedy_sampled(ModelRunner& r, const Ids& prompt, int n) {
  Ids rows(prompt.size() + static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 1);
  Ids out;
  SampleRequest q;
  q.params.temperature = 0.0f;
  ForwardOutput o = test::run_request(r, 0, rows, 0, prompt);
  auto pos = static_cast<int32_t>(prompt.size());
  for (int i = 0; i < n; ++i) {
    int32_t t = r.sample(o, std::span<const SampleRequest>(&q, 1))[0].token;
    out.push_back(t);
    if (i + 1 == n) break;
    o = test::run_request(r, 0, rows, pos++, {t});
  }
  return out;
}

std::vector<float> all_logits(ModelRunner& r, const Ids& tokens) {
  Ids rows(tokens.size());
  std::iota(rows.begin(), rows.end(), 1);
  return test::run_request(r, 0, rows, 0, tokens, true).logits;
}

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

std::vector<Ids> chat_prompts() {
  Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  ChatTemplate tpl = ChatTemplate::for_model(tok, nullptr);
  std::vector<Ids> out;
  for (const char* q : {"What is the capital of France?", "Write a haiku about the sea.", "List three prime numbers.",
                        "Explain what a GPU is in one sentence.", "Who wrote Hamlet?", "Translate 'good morning' to Spanish.",
                        "What is 12 times 12?", "Name a color of the rainbow."}) {
    std::vector<ChatMessage> m{{"user", q}};
    out.push_back(tok.encode(tpl.render(m), false, true));
  }
  return out;
}

}  // namespace

TEST_CASE("On the GPU the default model's greedy outputs equal the CPU backend's", "[gpu][cuda][model]") {
  auto gpu = cuda_runner(default_weights());
  auto cpu = cpu_runner(float_default_weights());
  int identical = 0;
  auto prompts = chat_prompts();
  for (size_t i = 0; i < prompts.size(); ++i) {
    Ids want = test::greedy(*cpu, prompts[i], 32);
    Ids got = greedy_sampled(*gpu, prompts[i], 32);
    if (got == want) {
      ++identical;
      continue;
    }
    // Where they part, the CPU's own logits must show a near tie.
    size_t at = 0;
    while (got[at] == want[at]) ++at;
    Ids seq = prompts[i];
    seq.insert(seq.end(), want.begin(), want.begin() + static_cast<ptrdiff_t>(at));
    auto logits = all_logits(*cpu, seq);
    const float* row = logits.data() + (seq.size() - 1) * static_cast<size_t>(default_weights().config.vocab_size);
    float gap = row[want[at]] - row[got[at]];
    std::printf("prompt %zu: GPU and CPU part at token %zu, CPU logit gap %.4f\n", i, at, gap);
    CHECK(gap < 0.25f);
  }
  // bf16 weights (the CPU keeps the dequantized values in float32) move
  // logits by a few hundredths, so a near tie may flip; anything else fails
  // above. On an H100: 6 of 8 identical, the others parting at gaps 0.07 and
  // 0.13.
  std::printf("default model, greedy 32 tokens: %d of %zu prompts identical on GPU and CPU\n", identical, prompts.size());
  CHECK(identical >= static_cast<int>(prompts.size()) / 2);
}

TEST_CASE("On the GPU teacher-forced logits of the default model track the CPU backend's", "[gpu][cuda][model]") {
  auto gpu = cuda_runner(default_weights());
  auto cpu = cpu_runner(float_default_weights());
  Ids seq = chat_prompts()[1];
  Ids cont = test::greedy(*cpu, seq, 48);
  seq.insert(seq.end(), cont.begin(), cont.end());
  auto a = all_logits(*gpu, seq), b = all_logits(*cpu, seq);
  const int32_t V = default_weights().config.vocab_size;
  int agree = 0;
  double worst = 0;
  for (size_t r = 0; r < seq.size(); ++r) {
    worst = std::max(worst, rel_l2(a.data() + r * V, b.data() + r * V, static_cast<size_t>(V)));
    agree += test::argmax(a.data() + r * V, V) == test::argmax(b.data() + r * V, V);
  }
  std::printf("default model, %zu positions: top-1 agreement %d, worst row relative L2 %.4f\n", seq.size(), agree, worst);
  CHECK(worst < 0.12);  // bf16 weights against float32; measured 0.079 on an H100
  CHECK(agree >= static_cast<int>(seq.size() * 97 / 100));
}

TEST_CASE("On the GPU paged prefix reuse, chunked extend and mixed batches equal a fresh prefill", "[gpu][cuda][model]") {
  auto gpu = cuda_runner(default_weights());
  const int32_t V = default_weights().config.vocab_size;
  Ids prompt = chat_prompts()[3];
  while (prompt.size() < 150) prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 20);
  auto full = all_logits(*gpu, prompt);
  const float* want = full.data() + (prompt.size() - 1) * static_cast<size_t>(V);
  std::mt19937 rng(5);
  for (int page : {1, 16}) {
    for (int split : {1, 7, 16, 33, 149}) {
      INFO("page " << page << " split " << split);
      // Shuffled pages, as the allocator hands them out.
      Ids pages(8192 / page - 1);
      std::iota(pages.begin(), pages.end(), 1);
      std::shuffle(pages.begin(), pages.end(), rng);
      Ids rows;
      for (size_t p = 0; rows.size() < prompt.size(); ++p) {
        for (int j = 0; j < page; ++j) rows.push_back(pages[p] * page + j);
      }
      Ids head(prompt.begin(), prompt.begin() + split), tail(prompt.begin() + split, prompt.end());
      test::run_request(*gpu, 1, rows, 0, head);
      auto out = test::run_request(*gpu, 1, rows, split, tail, true);
      const float* got = out.logits.data() + (tail.size() - 1) * static_cast<size_t>(V);
      CHECK(rel_l2(got, want, static_cast<size_t>(V)) < 1e-2);
    }
  }
  // A decode step and a prefill in one batch equal their solo passes.
  Ids other = chat_prompts()[0];
  Ids rows_a(prompt.size() + 1), rows_b(other.size());
  std::iota(rows_a.begin(), rows_a.end(), 1);
  std::iota(rows_b.begin(), rows_b.end(), 2000);
  test::run_request(*gpu, 0, rows_a, 0, prompt);
  auto solo_a = test::run_request(*gpu, 0, rows_a, static_cast<int32_t>(prompt.size()), {42}, true).logits;
  auto solo_b = test::run_request(*gpu, 1, rows_b, 0, other, true).logits;
  ForwardBatch b;
  b.reqs = {{0, static_cast<int32_t>(prompt.size()), 1}, {1, 0, static_cast<int32_t>(other.size())}};
  b.token_ids = {42};
  b.token_ids.insert(b.token_ids.end(), other.begin(), other.end());
  b.out_cache_loc = {rows_a.back()};
  b.out_cache_loc.insert(b.out_cache_loc.end(), rows_b.begin(), rows_b.end());
  b.writes = {{1, 0, rows_b}};
  auto mixed = gpu->forward(b);
  // Without all_logits the rows are each request's last token, on the device.
  REQUIRE(mixed.rows() == 2);
  b.all_logits = true;
  mixed = gpu->forward(b);
  CHECK(rel_l2(mixed.logits.data(), solo_a.data(), static_cast<size_t>(V)) < 1e-2);
  CHECK(rel_l2(mixed.logits.data() + mixed.logits.size() - V, solo_b.data() + solo_b.size() - V, static_cast<size_t>(V)) < 1e-2);
}

TEST_CASE("On the GPU a bad batch is refused before any device work and sampling checks its rows", "[gpu][cuda][model]") {
  auto gpu = cuda_runner(default_weights());
  ForwardBatch b;
  b.reqs = {{0, 0, 2}};
  b.token_ids = {1, 999999};
  b.out_cache_loc = {1, 2};
  b.writes = {{0, 0, {1, 2}}};
  CHECK_THROWS_AS(gpu->forward(b), std::invalid_argument);
  b.token_ids = {1, 2};
  auto out = gpu->forward(b);
  std::vector<SampleRequest> two(2);
  CHECK_THROWS_AS(gpu->sample(out, two), std::invalid_argument);
  CHECK(gpu->sample(out, std::span<const SampleRequest>(two.data(), 1)).size() == 1);
}

TEST_CASE("On the GPU a random Llama gives Hugging Face transformers' logits and greedy tokens", "[gpu][cuda][hf]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "actorlm_hf_reference";
  const std::string cmd = "python3 " + test::source_dir() + "/scripts/gpu/hf_reference.py " + dir.string();
  REQUIRE(std::system(cmd.c_str()) == 0);  // a GPU machine is expected to have torch and transformers
  nlohmann::json ref = nlohmann::json::parse(std::ifstream(dir / "reference.json"));
  LlamaWeights w = load_llama_weights(dir.string());
  auto gpu = cuda_runner(w, 4096, 512);
  // The CPU backend on the same checkpoint (float32 throughout) tells a
  // mismatch in the model's definition from a CUDA rounding effect.
  auto cpu = std::make_unique<ModelRunner>(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(0),
                                           ModelRunnerConfig{.kv_pool_rows = 4096, .max_requests = 8, .max_context = 512});
  const int V = ref["vocab"];
  REQUIRE(V == w.config.vocab_size);
  for (const auto& c : ref["cases"]) {
    Ids prompt = c["prompt"].get<Ids>(), cont = c["continuation"].get<Ids>();
    std::vector<float> hf = c["logits"].get<std::vector<float>>();
    Ids seq = prompt;
    seq.insert(seq.end(), cont.begin(), cont.end());
    auto ours = all_logits(*gpu, seq);
    REQUIRE(ours.size() == hf.size());
    auto host = all_logits(*cpu, seq);
    double worst = 0, mean = 0, worst_cpu = 0;
    size_t worst_row = 0;
    for (size_t r = 0; r < seq.size(); ++r) {
      double e = rel_l2(ours.data() + r * V, hf.data() + r * V, V);
      mean += e / static_cast<double>(seq.size());
      if (e > worst) worst = e, worst_row = r;
      worst_cpu = std::max(worst_cpu, rel_l2(host.data() + r * V, hf.data() + r * V, V));
    }
    Ids got = greedy_sampled(*gpu, prompt, static_cast<int>(cont.size()));
    size_t same = 0;
    while (same < got.size() && got[same] == cont[same]) ++same;
    std::printf("HF random Llama, prompt of %zu: GPU vs transformers relative L2 mean %.4f, worst %.4f (row %zu); "
                "CPU backend vs transformers worst %.5f; greedy %zu/%zu tokens identical\n",
                prompt.size(), mean, worst, worst_row, worst_cpu, same, cont.size());
    CHECK(worst_cpu < 1e-4);  // float32 against float64
    CHECK(worst < 3e-2);
    if (same < cont.size()) {
      // Only a near tie in transformers' own logits may part them.
      const float* row = hf.data() + (prompt.size() + same - 1) * static_cast<size_t>(V);
      float gap = row[cont[same]] - row[got[same]];
      std::printf("  parted at %zu, transformers' logit gap %.4f\n", same, gap);
      CHECK(gap < 0.05f);
    }
  }
}

TEST_CASE("On the GPU decode steps replayed from CUDA graphs equal directly launched ones", "[gpu][cuda][model]") {
  // A random model drawn on the device; batches of 1, 3 and 5 requests
  // (padded to graph buckets 1, 4 and 8), four decode steps each.
  ModelConfig c;
  c.n_layers = 4;
  c.hidden = 512;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.ffn_hidden = 1024;
  c.vocab_size = 1000;
  c.max_context = 1024;
  auto decode_all = [&](bool graphs) {
    setenv("ACTORLM_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    ModelRunner gpu(cuda::CudaExecutor::create_random(c, 7),
                    ModelRunnerConfig{.kv_pool_rows = 8192, .max_requests = 8, .max_context = 1024});
    unsetenv("ACTORLM_CUDA_GRAPHS");
    std::vector<std::pair<int32_t, float>> picks;  // greedy id and its logprob, every request, every step
    for (int n : {1, 3, 5}) {
      std::vector<Ids> rows(static_cast<size_t>(n));
      std::vector<int32_t> len(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        len[static_cast<size_t>(i)] = 20 + 13 * i;
        Ids prompt(static_cast<size_t>(len[static_cast<size_t>(i)]));
        for (size_t j = 0; j < prompt.size(); ++j) prompt[j] = static_cast<int32_t>((j * 31 + 7 * i) % 1000);
        rows[static_cast<size_t>(i)].resize(prompt.size() + 4);
        std::iota(rows[static_cast<size_t>(i)].begin(), rows[static_cast<size_t>(i)].end(), 1 + 1000 * i);
        test::run_request(gpu, i, rows[static_cast<size_t>(i)], 0, prompt);
      }
      for (int step = 0; step < 4; ++step) {
        ForwardBatch d;
        for (int i = 0; i < n; ++i) {
          const int32_t pos = len[static_cast<size_t>(i)] + step;
          const int32_t row = rows[static_cast<size_t>(i)][static_cast<size_t>(pos)];
          d.reqs.push_back({i, pos, 1});
          d.token_ids.push_back(100 + step * 7 + i);
          d.out_cache_loc.push_back(row);
          d.writes.push_back({i, pos, {row}});
        }
        auto out = gpu.forward(d);
        std::vector<SampleRequest> greedy(static_cast<size_t>(n));
        for (auto& g : greedy) g.params.temperature = 0.0f;
        for (const auto& r : gpu.sample(out, greedy)) picks.push_back({r.token, r.logprob});
      }
    }
    return picks;
  };
  // Padding changes the GEMM's row count, so cuBLAS may round differently:
  // the same ids, logprobs within bf16 noise.
  auto with = decode_all(true), without = decode_all(false);
  REQUIRE(with.size() == 4 * (1 + 3 + 5));
  REQUIRE(without.size() == with.size());
  for (size_t i = 0; i < with.size(); ++i) {
    INFO("pick " << i);
    CHECK(with[i].first == without[i].first);
    CHECK(with[i].second == Approx(without[i].second).margin(0.05));
  }
}

TEST_CASE("On the GPU KV rows copied out and into another pool continue the prompt exactly", "[gpu][cuda][model]") {
  // What the host and disk tiers and disaggregation do with a CUDA pool:
  // read a prompt's KV rows out, write them into other rows of another
  // engine, and extend from there as if it had computed them.
  auto a = cuda_runner(default_weights());
  auto b = cuda_runner(default_weights());
  const int32_t layers = default_weights().config.n_layers;
  CHECK(a->kv_dtype() == "bf16");
  Ids prompt = chat_prompts()[2];
  const auto n = static_cast<int32_t>(prompt.size());
  Ids rows_a(prompt.size()), rows_b(prompt.size());
  std::iota(rows_a.begin(), rows_a.end(), 10);
  std::mt19937 rng(3);
  std::iota(rows_b.begin(), rows_b.end(), 3000);
  std::shuffle(rows_b.begin(), rows_b.end(), rng);  // scattered, as the allocator hands them out
  Ids head(prompt.begin(), prompt.end() - 1);
  test::run_request(*a, 0, rows_a, 0, head);
  const auto want = test::run_request(*a, 0, rows_a, n - 1, {prompt.back()}, true).logits;
  const std::vector<uint8_t> kv = a->read_kv(std::span(rows_a).first(head.size()), 0, layers);
  REQUIRE(static_cast<int64_t>(kv.size()) == static_cast<int64_t>(head.size()) * layers * a->kv_token_bytes());
  b->write_kv(std::span(rows_b).first(head.size()), 0, layers, kv);
  CHECK(b->read_kv(std::span(rows_b).first(head.size()), 0, layers) == kv);
  const auto got = test::run_request(*b, 0, rows_b, n - 1, {prompt.back()}, true).logits;
  REQUIRE(got.size() == want.size());
  CHECK(got == want);  // the same bf16 KV and the same kernels: bit for bit
  // A layer range copies only those layers.
  const std::vector<uint8_t> two = a->read_kv(std::span(rows_a).first(4), 1, 3);
  CHECK(static_cast<int64_t>(two.size()) == 4 * 2 * a->kv_token_bytes());
}

TEST_CASE("On the GPU every architecture file runs the shared layer loop and tracks the CPU backend, or is refused by name",
          "[gpu][cuda][architectures]") {
  // The tiny random-weight GGUFs of tests/model/architectures_test.cpp (one
  // per architecture, checked there against llama.cpp). bf16 weights and
  // activations here against float32 on the CPU: agreement within bf16
  // rounding, not bit for bit.
  const std::vector<std::string> files{"llama", "qwen2", "qwen3",    "gemma",   "gemma2", "gemma3",
                                       "phi3",  "smollm3", "qwen3moe", "mixtral"};
  const std::string arch = GENERATE_COPY(from_range(files));
  INFO(arch);
  LlamaWeights w = load_llama_weights(test::fixture_path("architectures/" + arch + ".gguf"));
  const std::string missing = w.config.features_not_on_cuda();
  if (!missing.empty()) {
    try {
      cuda::CudaExecutor::create(w);
      FAIL("a " << arch << " model needing " << missing << " was accepted");
    } catch (const std::runtime_error& e) {
      std::printf("%s: refused on the GPU (%s)\n", arch.c_str(), e.what());
      CHECK(std::string(e.what()).find(missing) != std::string::npos);
    }
    return;
  }
  auto gpu = cuda_runner(w, 512, 64);
  auto cpu = std::make_unique<ModelRunner>(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(0),
                                           ModelRunnerConfig{.kv_pool_rows = 512, .max_requests = 8, .max_context = 64});
  const int32_t V = w.config.vocab_size;
  Ids seq;
  for (int i = 0; i < 24; ++i) seq.push_back(static_cast<int32_t>((i * 37 + 11) % V));
  const std::vector<float> ours = all_logits(*gpu, seq), host = all_logits(*cpu, seq);
  // Bound on a logit's distance from the CPU's, relative to the row's
  // largest logit: bf16 against float32 (measured 0.010-0.022 on an H200).
  constexpr double kTolerance = 0.05;
  // Two tokens whose CPU logits lie within the tolerance are a near tie:
  // bf16 rounding may pick either, so a top-1 or greedy difference there is
  // allowed, and nowhere else.
  auto near_tie = [&](const float* cpu_row, int32_t a, int32_t b) {
    double scale = 1e-3;
    for (int32_t i = 0; i < V; ++i) scale = std::max(scale, std::abs(static_cast<double>(cpu_row[i])));
    return std::abs(static_cast<double>(cpu_row[a]) - cpu_row[b]) / scale < kTolerance;
  };
  double worst = 0;
  int same_top = 0;
  for (size_t r = 0; r < seq.size(); ++r) {
    const float* a = ours.data() + r * V;
    const float* b = host.data() + r * V;
    double err = 0, scale = 1e-3;
    for (int32_t i = 0; i < V; ++i) {
      err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
      scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    }
    worst = std::max(worst, err / scale);
    const auto top_gpu = static_cast<int32_t>(std::max_element(a, a + V) - a);
    const auto top_cpu = static_cast<int32_t>(std::max_element(b, b + V) - b);
    same_top += top_gpu == top_cpu;
    INFO("row " << r << ": GPU top-1 " << top_gpu << ", CPU top-1 " << top_cpu);
    CHECK((top_gpu == top_cpu || near_tie(b, top_gpu, top_cpu)));
  }
  // The same pass over the cached first half (a prefix hit): the same bf16
  // KV and the same kernels whatever the batch, so bit for bit.
  Ids rows(seq.size());
  std::iota(rows.begin(), rows.end(), 1);
  ForwardOutput whole = test::run_request(*gpu, 0, rows, 0, seq, true);
  Ids rows2 = rows;
  for (size_t i = 12; i < rows2.size(); ++i) rows2[i] = static_cast<int32_t>(200 + i);
  ForwardOutput extended = test::run_request(*gpu, 1, rows2, 12, Ids(seq.begin() + 12, seq.end()), true);
  double reuse = 0;
  for (size_t r = 0; r < 12; ++r) {
    for (int32_t i = 0; i < V; ++i) {
      reuse = std::max(reuse, static_cast<double>(std::abs(extended.row(r)[i] - whole.row(r + 12)[i])));
    }
  }
  // Greedy decoding from 8 tokens: identical to the CPU's until a near tie,
  // if one comes.
  const Ids prompt(seq.begin(), seq.begin() + 8);
  const Ids gpu_greedy = greedy_sampled(*gpu, prompt, 16);
  const Ids cpu_greedy = test::greedy(*cpu, prompt, 16);
  size_t agree = 0;
  while (agree < gpu_greedy.size() && gpu_greedy[agree] == cpu_greedy[agree]) ++agree;
  std::string parted = "";
  if (agree < gpu_greedy.size()) {
    Ids upto = prompt;
    upto.insert(upto.end(), cpu_greedy.begin(), cpu_greedy.begin() + static_cast<std::ptrdiff_t>(agree));
    const std::vector<float> at = all_logits(*cpu, upto);
    const float* row = at.data() + (upto.size() - 1) * static_cast<size_t>(V);
    const bool tie = near_tie(row, gpu_greedy[agree], cpu_greedy[agree]);
    parted = tie ? ", then a near tie" : ", then NOT a near tie";
    CHECK(tie);
  }
  std::printf("%s on the GPU: logits within %.4f of each row's largest (CPU backend), top-1 %d/24, "
              "prefix hit %s one pass (largest difference %.4g), greedy %zu/16 identical%s\n",
              arch.c_str(), worst, same_top, reuse == 0 ? "bit-identical to" : "DIFFERS from", reuse, agree,
              parted.c_str());
  CHECK(worst < kTolerance);
  CHECK(reuse == 0);
}
