// What moving one request's KV between engines costs, in process: the
// prefill engine reads the prompt's rows chunk by chunk, each chunk becomes
// a sealed KvChunk message, the decode engine opens and checks it and writes
// the rows into its pool. Against: a plain memcpy of the same bytes, and the
// prompt's own prefill time. (The network between two nodes comes on top;
// this is what the engines themselves add.)
//
//   ./build/bench/kv_transfer_bench [threads] [rounds]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cluster/transfer/kv_transfer.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/model_runner.hpp"

using namespace actorlm;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

ForwardOutput prefill(ModelRunner& r, const std::vector<int32_t>& rows, const std::vector<int32_t>& tokens) {
  ForwardBatch b;
  b.reqs.push_back({0, 0, static_cast<int32_t>(tokens.size())});
  b.token_ids = tokens;
  b.out_cache_loc = rows;
  b.writes.push_back({0, 0, rows});
  return r.forward(b);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  auto make = [&] {
    return ModelRunner(load_llama_weights(default_model_path()), std::make_unique<cpu::CpuBackend>(threads),
                       {.kv_pool_rows = 4200, .max_requests = 2, .max_context = 2048});
  };
  ModelRunner a = make(), b = make();
  const NodeModel model{"bench", a.model_config().vocab_size, a.model_config().n_layers, a.model_config().hidden, 1};
  const KvLayout layout = kv_layout(a, model);
  std::mt19937 rng(1);
  std::printf("KV per token: %lld bytes (%s, %d layers); %d threads, median of %d rounds\n",
              static_cast<long long>(layout.token_bytes * layout.n_layers), layout.dtype.c_str(), layout.n_layers,
              threads, rounds);
  for (int n : {512, 2000}) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % 40000) + 100;
    std::vector<int32_t> from(static_cast<size_t>(n)), to(static_cast<size_t>(n));
    std::iota(from.begin(), from.end(), 1);
    std::iota(to.begin(), to.end(), 2100);
    std::vector<double> t_prefill, t_memcpy, t_transfer;
    const auto bytes = static_cast<double>(n) * static_cast<double>(layout.token_bytes * layout.n_layers);
    for (int round = 0; round < rounds; ++round) {
      auto t0 = Clock::now();
      prefill(a, from, tokens);
      t_prefill.push_back(seconds_since(t0));
      // The floor: the same bytes copied once, buffer to buffer.
      std::vector<uint8_t> src = a.read_kv(from, 0, layout.n_layers), dst(src.size());
      t0 = Clock::now();
      std::memcpy(dst.data(), src.data(), src.size());
      t_memcpy.push_back(seconds_since(t0));
      // The transfer path, 4 MB chunks.
      t0 = Clock::now();
      KvAssembly assembly(7, n, layout.n_layers);
      for (const KvChunkRange& r : plan_kv_chunks(n, layout, int64_t{4} << 20)) {
        auto part = [&](const std::vector<int32_t>& rows) {
          return std::span<const int32_t>(rows).subspan(static_cast<size_t>(r.first_token),
                                                        static_cast<size_t>(r.last_token - r.first_token));
        };
        std::vector<uint8_t> wire = encode_kv_chunk(7, layout, n, r, a.read_kv(part(from), r.first_layer, r.last_layer));
        std::string error;
        auto chunk = decode_kv_chunk(wire, layout, &error);
        if (!chunk || assembly.accept(*chunk)) {
          std::fprintf(stderr, "chunk refused: %s\n", error.c_str());
          return 1;
        }
        b.write_kv(part(to), r.first_layer, r.last_layer, chunk->data);
      }
      t_transfer.push_back(seconds_since(t0));
      if (!assembly.complete()) return 1;
    }
    const double p = median(t_prefill), m = median(t_memcpy), t = median(t_transfer);
    std::printf("prompt %4d tokens, %6.1f MB of KV: prefill %7.1f ms | memcpy %6.2f ms (%5.1f GB/s) | "
                "read+encode+check+write %6.2f ms (%5.2f GB/s, %4.1fx memcpy, %4.1f%% of the prefill)\n",
                n, bytes / 1e6, p * 1e3, m * 1e3, bytes / m / 1e9, t * 1e3, bytes / t / 1e9, t / m, 100 * t / p);
  }
  return 0;
}
