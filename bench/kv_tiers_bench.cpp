// What a write-through costs the scheduler's thread: one prompt's KV (the
// default model's shape, float32, blocks of 64 tokens) read out of the pool
// and sent down to a host tier and a disk tier. The scheduler's thread waits
// for after_prefill() to return; the stores then finish on the tiers' own
// thread (drain()). Before the tiers had that thread, the scheduler waited
// for both, which is the "read + stores" column.
//
//   ./build/bench/kv_tiers_bench [tokens] [rounds]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "scheduler/kv_tiers.hpp"

using namespace actorlm;
using Clock = std::chrono::steady_clock;

namespace {

// SmolLM2-135M: 30 layers, 3 KV heads of 64, f32: 46,080 bytes per token.
constexpr int32_t kLayers = 30;
constexpr int64_t kTokenBytes = 2 * 3 * 64 * 4;  // per layer

// A pool that answers reads with a copy of its rows, as the CPU worker does.
class PoolWorker final : public Worker {
 public:
  explicit PoolWorker(int32_t rows) : kv_(static_cast<size_t>(rows) * kLayers * kTokenBytes) {
    std::mt19937 rng(1);
    for (auto& b : kv_) b = static_cast<uint8_t>(rng());
  }
  std::vector<SampleResult> run(const ForwardBatch&, std::span<const SampleRequest>) override { return {}; }
  std::vector<uint8_t> read_kv(std::span<const int32_t> rows, int32_t first, int32_t last) override {
    std::vector<uint8_t> out(rows.size() * static_cast<size_t>(last - first) * kTokenBytes);
    uint8_t* at = out.data();
    for (int32_t l = first; l < last; ++l) {
      for (int32_t r : rows) {
        std::memcpy(at, kv_.data() + (static_cast<size_t>(r) * kLayers + static_cast<size_t>(l)) * kTokenBytes, kTokenBytes);
        at += kTokenBytes;
      }
    }
    return out;
  }

 private:
  std::vector<uint8_t> kv_;
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int32_t tokens = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const KvBlockLayout layout{"bench model", "f32", kLayers, kTokenBytes, 64};
  PoolWorker worker(tokens);
  std::vector<int32_t> rows(static_cast<size_t>(tokens));
  for (int32_t i = 0; i < tokens; ++i) rows[static_cast<size_t>(i)] = tokens - 1 - i;
  std::vector<double> caller, total;
  std::mt19937 rng(2);
  for (int round = 0; round < rounds; ++round) {
    const auto dir = std::filesystem::temp_directory_path() / ("actorlm-kv-tiers-bench-" + std::to_string(rng()));
    {
      auto host = std::make_shared<KvHostStore>(layout, int64_t{4} << 30, KvHostDtype::same);
      auto disk = std::make_shared<KvDiskStore>(dir.string(), layout, int64_t{4} << 30);
      KvTiers tiers(host, disk, HiCacheWritePolicy::write_through);
      std::vector<int32_t> prompt(static_cast<size_t>(tokens));
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % 49152);  // a new prompt: every block is stored
      const auto start = Clock::now();
      tiers.after_prefill(worker, prompt, rows);
      caller.push_back(ms_since(start));
      tiers.drain();
      total.push_back(ms_since(start));
    }
    std::filesystem::remove_all(dir);
  }
  const double mb = double(tokens / 64 * 64) * double(kLayers * kTokenBytes) / 1e6;
  std::printf("write-through of a %d-token prompt (%.1f MB in %d blocks) to a host and a disk tier, median of %d:\n",
              tokens, mb, tokens / 64, rounds);
  std::printf("  scheduler thread (read, queue): %8.1f ms\n", median(caller));
  std::printf("  read + stores (drained):        %8.1f ms\n", median(total));
  return 0;
}
