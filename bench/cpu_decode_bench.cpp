// CPU forward-pass throughput on the default model: prefill tokens/s for one
// prompt, and decode tokens/s for batches of independent requests (each
// request one new token per step over its own context).
//
//   ./build/bench/cpu_decode_bench [threads]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/model_runner.hpp"

using namespace actorlm;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  if (threads < 1 || threads > 256) {
    std::fprintf(stderr, "threads must be in [1, 256]\n");
    return 2;
  }
  const int32_t ctx = 640, max_batch = 32;
  ModelRunner r(load_llama_weights(default_model_path()), std::make_unique<cpu::CpuBackend>(threads),
                {.kv_pool_rows = int64_t(ctx) * max_batch + 1, .max_requests = max_batch, .max_context = ctx});
  auto rows_of = [&](int slot) {
    std::vector<int32_t> rows(ctx);
    std::iota(rows.begin(), rows.end(), 1 + slot * ctx);
    return rows;
  };
  std::printf("cpu_decode_bench: default model, %d threads\n", threads);

  for (int32_t n : {128, 512}) {
    ForwardBatch b;
    auto rows = rows_of(0);
    b.reqs = {{0, 0, n}};
    for (int32_t i = 0; i < n; ++i) b.token_ids.push_back(100 + (i * 37) % 40000);
    b.out_cache_loc.assign(rows.begin(), rows.begin() + n);
    b.writes = {{0, 0, b.out_cache_loc}};
    r.forward(b);  // warm-up
    double t = now();
    r.forward(b);
    double s = now() - t;
    std::printf("  prefill %4d tokens: %.3f s = %.0f tokens/s\n", n, s, n / s);
  }

  const int32_t context = 128, steps = 32;
  for (int32_t bs : {1, 8, 32}) {
    // Every request first has `context` tokens of KV.
    for (int32_t q = 0; q < bs; ++q) {
      ForwardBatch b;
      auto rows = rows_of(q);
      b.reqs = {{q, 0, context}};
      for (int32_t i = 0; i < context; ++i) b.token_ids.push_back(200 + (i * 13 + q) % 40000);
      b.out_cache_loc.assign(rows.begin(), rows.begin() + context);
      b.writes = {{q, 0, b.out_cache_loc}};
      r.forward(b);
    }
    double t = now();
    for (int32_t s = 0; s < steps; ++s) {
      ForwardBatch b;
      for (int32_t q = 0; q < bs; ++q) {
        int32_t pos = context + s;
        int32_t row = rows_of(q)[static_cast<size_t>(pos)];
        b.reqs.push_back({q, pos, 1});
        b.token_ids.push_back(300 + q);
        b.out_cache_loc.push_back(row);
        b.writes.push_back({q, pos, {row}});
      }
      r.forward(b);
    }
    double s = now() - t;
    std::printf("  decode batch %2d (context %d): %.1f ms/step, %.1f tokens/s\n", bs, context, 1000 * s / steps,
                bs * steps / s);
  }
  return 0;
}
