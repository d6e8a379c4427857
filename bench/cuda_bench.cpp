// GPU benchmarks (docs/BENCHMARKS.md records their output with the device):
//   cuda_bench attention            decode attention bandwidth, batch x context grid
//   cuda_bench decode8b             decode step of a Llama-3-8B-shaped model (random
//                                   bf16 weights) at batch 1 and 64 vs the memory roofline
//   cuda_bench prefill8b            prefill throughput of the same model
//   cuda_bench e2e DIR BATCH NEW    end-to-end generation (scheduler + CUDA executor)
//                                   on a Hugging Face folder, tokens/s
// Timings: CUDA events for kernels (median of many launches); host clocks
// around whole steps, which end in a device synchronisation (sampled ids
// come back), median of several.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "executor/cuda_executor.hpp"
#include "bench/cuda_microbench.hpp"
#include "model/model_runner.hpp"
#include "scheduler/kv_service.hpp"
#include "scheduler/scheduler.hpp"
#include "scheduler/worker.hpp"

using namespace actorlm;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double copy_bandwidth() {
  auto t = cuda::time_device_copy(size_t{4} << 30, 20);
  std::printf("device-to-device copy: %.0f GB/s (bytes read + written, 4 GiB, median of 20)\n", t.gb_per_s());
  return t.gb_per_s();
}

int attention() {
  const double bw = copy_bandwidth();
  std::printf("\ndecode attention, Llama-3-8B heads (32 q / 8 kv, head_dim 128), bf16 KV, page size 16\n");
  std::printf("%6s %8s %10s %10s %9s %10s\n", "batch", "context", "time_us", "GB/s", "%copy_bw", "%3.35TB/s");
  for (int batch : {1, 8, 32, 64, 128}) {
    for (int ctx : {512, 2048, 8192, 32768}) {
      double kv_gb = 2.0 * batch * ctx * 8 * 128 * 2 / 1e9;
      if (kv_gb > 20) continue;
      auto t = cuda::time_decode_attention(batch, ctx, 32, 8, 128, 16, 50);
      std::printf("%6d %8d %10.1f %10.0f %8.1f%% %9.1f%%\n", batch, ctx, t.ms * 1000, t.gb_per_s(),
                  100 * t.gb_per_s() / bw, 100 * t.gb_per_s() / 3350);
    }
  }
  return 0;
}

ModelConfig llama3_8b() {
  ModelConfig c;
  c.n_layers = 32;
  c.hidden = 4096;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.ffn_hidden = 14336;
  c.vocab_size = 128256;
  c.max_context = 8192;
  c.rope_theta = 500000.0f;
  return c;
}

// Runs `batch` requests of `ctx` random tokens through prefill, then times
// decode steps (forward + greedy sample on the device).
int decode8b() {
  const double bw = copy_bandwidth();
  const ModelConfig c = llama3_8b();
  auto ex = cuda::CudaExecutor::create_random(c, 1);
  const double weight_bytes = static_cast<double>(ex->weight_bytes());
  std::printf("Llama-3-8B shape, random bf16 weights: %.2f GB on %s\n", weight_bytes / 1e9, ex->device_name().c_str());
  const int ctx = 512, steps = 16;
  ModelRunner r(std::move(ex), {.kv_pool_rows = 64 * (ctx + steps + 1) + 1, .max_requests = 64, .max_context = ctx + steps + 1});
  std::printf("%6s %8s %10s %12s %12s %10s\n", "batch", "context", "step_ms", "tokens/s", "roofline_ms", "of_roof");
  for (int batch : {1, 64}) {
    std::mt19937 rng(batch);
    std::vector<std::vector<int32_t>> rows(static_cast<size_t>(batch));
    int32_t next_row = 1;
    for (int b0 = 0; b0 < batch; b0 += 8) {  // prefill in groups of 8 requests
      ForwardBatch fb;
      for (int b = b0; b < std::min(batch, b0 + 8); ++b) {
        auto& rw = rows[static_cast<size_t>(b)];
        for (int i = 0; i < ctx + steps; ++i) rw.push_back(next_row++);
        fb.reqs.push_back({b, 0, ctx});
        for (int i = 0; i < ctx; ++i) fb.token_ids.push_back(static_cast<int32_t>(rng() % c.vocab_size));
        fb.out_cache_loc.insert(fb.out_cache_loc.end(), rw.begin(), rw.begin() + ctx);
        fb.writes.push_back({b, 0, rw});
      }
      r.forward(fb);
    }
    std::vector<SampleRequest> greedy(static_cast<size_t>(batch));
    for (auto& g : greedy) g.params.temperature = 0;
    std::vector<double> ms;
    for (int s = 0; s < steps; ++s) {
      ForwardBatch fb;
      for (int b = 0; b < batch; ++b) {
        fb.reqs.push_back({b, ctx + s, 1});
        fb.token_ids.push_back(static_cast<int32_t>(rng() % c.vocab_size));
        fb.out_cache_loc.push_back(rows[static_cast<size_t>(b)][static_cast<size_t>(ctx + s)]);
      }
      auto t0 = Clock::now();
      auto out = r.forward(fb);
      r.sample(out, greedy);
      ms.push_back(seconds(t0, Clock::now()) * 1000);
    }
    std::sort(ms.begin(), ms.end());
    const double step = ms[ms.size() / 2];
    const double kv_bytes = 2.0 * batch * (ctx + steps / 2) * c.n_layers * c.kv_dim() * 2;
    const double roof = (weight_bytes + kv_bytes) / (bw * 1e6);
    std::printf("%6d %8d %10.2f %12.0f %12.2f %9.0f%%\n", batch, ctx, step, batch * 1000.0 / step, roof, 100 * roof / step);
  }
  return 0;
}

int prefill8b() {
  const ModelConfig c = llama3_8b();
  auto ex = cuda::CudaExecutor::create_random(c, 2);
  ModelRunner r(std::move(ex), {.kv_pool_rows = 16 * 2048 + 1, .max_requests = 16, .max_context = 4096});
  std::printf("%8s %8s %10s %12s %10s\n", "requests", "tokens", "ms", "tokens/s", "TFLOP/s");
  std::mt19937 rng(3);
  for (auto [n, len] : {std::pair{1, 512}, std::pair{1, 2048}, std::pair{4, 2048}, std::pair{8, 512}, std::pair{16, 1024}}) {
    std::vector<double> ms;
    for (int rep = 0; rep < 4; ++rep) {
      ForwardBatch fb;
      int32_t row = 1;
      for (int b = 0; b < n; ++b) {
        std::vector<int32_t> rw(static_cast<size_t>(len));
        std::iota(rw.begin(), rw.end(), row);
        row += len;
        fb.reqs.push_back({b, 0, len});
        for (int i = 0; i < len; ++i) fb.token_ids.push_back(static_cast<int32_t>(rng() % c.vocab_size));
        fb.out_cache_loc.insert(fb.out_cache_loc.end(), rw.begin(), rw.end());
        fb.writes.push_back({b, 0, rw});
      }
      auto t0 = Clock::now();
      auto out = r.forward(fb);
      std::vector<SampleRequest> g(static_cast<size_t>(n));
      for (auto& q : g) q.params.temperature = 0;
      r.sample(out, g);
      if (rep) ms.push_back(seconds(t0, Clock::now()) * 1000);  // the first pass grows scratch buffers
    }
    std::sort(ms.begin(), ms.end());
    const double t = ms[ms.size() / 2], tokens = double(n) * len;
    const double flops = 2.0 * 7.5e9 * tokens + 4.0 * c.n_layers * c.q_dim() * double(n) * len * len / 2;
    std::printf("%8d %8d %10.1f %12.0f %10.0f\n", n, len, t, tokens * 1000 / t, flops / (t * 1e9));
  }
  return 0;
}

int e2e(const std::string& dir, int batch, int new_tokens, int prompt_len) {
  LlamaWeights w = load_llama_weights(dir);
  const ModelConfig c = w.config;
  auto ex = cuda::CudaExecutor::create(w);
  const int32_t ctx = prompt_len + new_tokens + 8;
  const int64_t tokens = int64_t{batch} * ctx + 64;
  LocalKvService kv({tokens, 1, batch + 8, ctx, false});
  ModelRunner r(std::move(ex), {.kv_pool_rows = kv.store().allocator().pool_rows(), .max_requests = batch + 8, .max_context = ctx});
  LocalWorker worker(r);
  SchedulerConfig sc;
  sc.max_running_requests = batch;
  sc.max_prefill_tokens = 16384;
  sc.chunked_prefill_size = 8192;
  sc.max_context = ctx;
  Scheduler s(sc, kv, worker);
  std::mt19937 rng(4);
  for (int run = 0; run < 2; ++run) {  // the first run warms up (scratch, cuBLAS heuristics)
    int64_t generated = 0;
    auto t0 = Clock::now();
    for (int b = 0; b < batch; ++b) {
      Request q;
      q.id = static_cast<uint64_t>(run * 100000 + b);
      for (int i = 0; i < prompt_len; ++i) q.prompt.push_back(3 + static_cast<int32_t>(rng() % (c.vocab_size - 3)));
      q.sampling.temperature = 0;
      q.stop.max_new_tokens = new_tokens;
      q.stop.ignore_eos = true;
      if (auto err = s.submit(std::move(q))) {
        std::fprintf(stderr, "submit: %s\n", err->c_str());
        return 1;
      }
    }
    while (!s.idle()) {
      for (const auto& e : s.step()) generated += e.token >= 0;
    }
    double sec = seconds(t0, Clock::now());
    if (run == 1) {
      std::printf("actorlm e2e: batch %d, prompt %d, %d new tokens: %.3f s, %.0f output tokens/s\n", batch, prompt_len,
                  new_tokens, sec, generated / sec);
    }
    kv.flush_cache();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "attention") return attention();
    if (mode == "decode8b") return decode8b();
    if (mode == "prefill8b") return prefill8b();
    if (mode == "e2e" && argc >= 5) {
      return e2e(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), argc > 5 ? std::atoi(argv[5]) : 128);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: cuda_bench attention | decode8b | prefill8b | e2e DIR BATCH NEW_TOKENS [PROMPT_LEN]\n");
  return 2;
}
