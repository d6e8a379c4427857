// CPU forward-pass throughput of one GGUF model, in the shapes llama.cpp's
// llama-bench and llama-batched-bench measure (bench/llamacpp_compare.py
// runs both and alternates them):
//   prefill N      one prompt of N tokens from an empty cache, tokens/s
//   decode C xB    B independent sequences, each with C tokens of context,
//                  one new token each per step for 32 steps, total tokens/s
// Each figure is the median of `repeats` timed runs after one warm-up.
//
//   ./build/bench/cpu_decode_bench [--threads N] [--model FILE.gguf] [--repeats R]
//                                  [--prefill 128,512,2048] [--decode 128x1,2048x1,128x8,128x32]
//                                  [--kv-cache-dtype auto|f16]
//
// Output: one line per figure, "prefill 512 t/s 812.3" / "decode 128x8 t/s 201.4".

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/quantized_matmul.hpp"
#include "model/default_model.hpp"
#include "model/host_executor.hpp"
#include "model/model_runner.hpp"

using namespace actorlm;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<int> int_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    long v = std::strtol(p, &end, 10);
    if (end == p || v < 1 || v > 65536) return {0};  // refused by the caller's check
    out.push_back(static_cast<int>(v));
    p = *end == ',' || *end == 'x' ? end + 1 : end;
    if (*end && *end != ',' && *end != 'x') return {0};
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: cpu_decode_bench [--threads N] [--model FILE] [--repeats R] [--prefill N,...] "
               "[--decode CxB,...] [--kv-cache-dtype auto|f16]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 3;
  bool f16_kv = false;
  std::string model = default_model_path();
  std::vector<int> prefill = {128, 512, 2048};
  std::vector<int> decode = {128, 1, 2048, 1, 128, 8, 128, 32};  // context, batch pairs
  for (int i = 1; i < argc; ++i) {
    auto value = [&] {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--threads")) {
      threads = std::atoi(value());
    } else if (!std::strcmp(argv[i], "--model")) {
      model = value();
    } else if (!std::strcmp(argv[i], "--repeats")) {
      repeats = std::atoi(value());
    } else if (!std::strcmp(argv[i], "--prefill")) {
      prefill = int_list(value());
    } else if (!std::strcmp(argv[i], "--decode")) {
      decode = int_list(value());
    } else if (!std::strcmp(argv[i], "--kv-cache-dtype")) {
      const std::string d = value();
      if (d != "auto" && d != "f16") usage();
      f16_kv = d == "f16";
    } else if (i == 1 && std::atoi(argv[i]) > 0) {
      threads = std::atoi(argv[i]);  // the old positional form
    } else {
      usage();
    }
  }
  if (threads < 1 || threads > 256 || repeats < 1 || repeats > 100 || decode.size() % 2) usage();
  // A shape int_list could not read, or nothing to measure (--prefill 0
  // died on the model runner's own check instead).
  if (std::count(prefill.begin(), prefill.end(), 0) || std::count(decode.begin(), decode.end(), 0) ||
      (prefill.empty() && decode.empty())) {
    usage();
  }

  int32_t ctx = 0, max_batch = 1;
  for (int n : prefill) ctx = std::max(ctx, n);
  for (size_t i = 0; i < decode.size(); i += 2) {
    ctx = std::max(ctx, decode[i] + 40);
    max_batch = std::max(max_batch, decode[i + 1]);
  }
  ModelRunner r(std::make_unique<HostExecutor>(load_llama_weights(model), std::make_unique<cpu::CpuBackend>(threads),
                                               f16_kv),
                {.kv_pool_rows = int64_t(ctx) * max_batch + 1, .max_requests = max_batch, .max_context = ctx});
  auto rows_of = [&](int slot) {
    std::vector<int32_t> rows(static_cast<size_t>(ctx));
    std::iota(rows.begin(), rows.end(), 1 + slot * ctx);
    return rows;
  };
  std::fprintf(stderr, "cpu_decode_bench: %s, %d threads, ISA %s\n", model.c_str(), threads,
               cpu::isa_name(cpu::best_isa()));

  for (int32_t n : prefill) {
    ForwardBatch b;
    auto rows = rows_of(0);
    b.reqs = {{0, 0, n}};
    for (int32_t i = 0; i < n; ++i) b.token_ids.push_back(100 + (i * 37) % 40000);
    b.out_cache_loc.assign(rows.begin(), rows.begin() + n);
    b.writes = {{0, 0, b.out_cache_loc}};
    r.forward(b);  // warm-up
    std::vector<double> rates;
    for (int k = 0; k < repeats; ++k) {
      double t = now();
      r.forward(b);
      rates.push_back(n / (now() - t));
    }
    std::printf("prefill %d t/s %.1f\n", n, median(rates));
    std::fflush(stdout);
  }

  const int32_t steps = 32;
  for (size_t i = 0; i < decode.size(); i += 2) {
    const int32_t context = decode[i], bs = decode[i + 1];
    // Every sequence first has `context` tokens of KV.
    for (int32_t q = 0; q < bs; ++q) {
      ForwardBatch b;
      auto rows = rows_of(q);
      b.reqs = {{q, 0, context}};
      for (int32_t j = 0; j < context; ++j) b.token_ids.push_back(200 + (j * 13 + q) % 40000);
      b.out_cache_loc.assign(rows.begin(), rows.begin() + context);
      b.writes = {{q, 0, b.out_cache_loc}};
      r.forward(b);
    }
    std::vector<double> rates;
    for (int k = 0; k <= repeats; ++k) {  // the first pass warms up
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
      if (k > 0) rates.push_back(bs * steps / (now() - t));
    }
    std::printf("decode %dx%d t/s %.1f\n", context, bs, median(rates));
    std::fflush(stdout);
  }
  return 0;
}
