// The KV cache's three tiers together (pool, host, disk) under 10,000 random
// operations per configuration: requests with shared prefixes arrive, run,
// are aborted; the pool's cache is flushed, the host tier emptied, disk
// blocks damaged. After every operation the pool's invariant (free +
// evictable + protected + private == capacity, locks exactly the running
// requests') and each tier's own hold, and every request that completes has
// exactly the output its prompt determines.
//
// The worker is a stand-in whose KV row for a position holds a hash chained
// over every token up to it, in every layer, and whose next token is a fold
// of every row of the request (it "attends" to all of them) modulo the
// vocabulary: as with a real model, an output is right only if every row it
// attends to holds that prompt's KV. A block loaded from the
// wrong prefix, a stale row or a damaged byte changes the output (or trips
// the worker's own check that a row's layers agree).

#include "scheduler/kv_tiers.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <thread>

#include "scheduler/scheduler.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

namespace {

constexpr int32_t kLayers = 2;
constexpr int64_t kTokenBytes = 16;  // per layer: 8 bytes of K, 8 of V
constexpr int32_t kVocab = 1000;
constexpr uint64_t kSeed = 0x5eed;

uint64_t chain(uint64_t h, int32_t token) {
  uint64_t z = h ^ (static_cast<uint64_t>(token) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Each layer's K and V words are the hash salted by layer and half, so a row
// whose words disagree is caught.
uint64_t word(uint64_t h, int32_t layer, int half) { return h ^ (0x100000001b3ull * static_cast<uint64_t>(2 * layer + half + 1)); }

// Order matters in the fold, as position does in attention.
uint64_t fold(uint64_t f, uint64_t h) { return ((f << 1) | (f >> 63)) ^ h; }

// What a request's output must be: the fold of the hashes chained over the
// prompt, then over each token it produces.
Ids expected_output(const Ids& prompt, size_t n) {
  uint64_t h = kSeed, f = 0;
  for (int32_t t : prompt) f = fold(f, h = chain(h, t));
  Ids out;
  while (out.size() < n) {
    out.push_back(static_cast<int32_t>(f % kVocab));
    f = fold(f, h = chain(h, out.back()));
  }
  return out;
}

class HashWorker final : public Worker {
 public:
  explicit HashWorker(int64_t rows) : kv_(static_cast<size_t>(rows) * kLayers * 2) {}

  std::vector<SampleResult> run(const ForwardBatch& batch, std::span<const SampleRequest>) override {
    for (const auto& w : batch.writes) {
      auto& t = table_[w.slot];
      t.resize(std::max(t.size(), static_cast<size_t>(w.start) + w.kv.size()));
      std::copy(w.kv.begin(), w.kv.end(), t.begin() + w.start);
    }
    std::vector<SampleResult> out;
    size_t at = 0;
    for (const auto& r : batch.reqs) {
      const auto& t = table_.at(r.slot);
      uint64_t h = r.prefix_len == 0 ? kSeed : hash_of(t.at(static_cast<size_t>(r.prefix_len - 1)));
      for (int32_t i = 0; i < r.extend_len; ++i, ++at) {
        const int32_t row = batch.out_cache_loc[at];
        if (t.at(static_cast<size_t>(r.prefix_len + i)) != row) throw std::logic_error("req_to_token disagrees with out_cache_loc");
        h = chain(h, batch.token_ids[at]);
        for (int32_t l = 0; l < kLayers; ++l) {
          for (int half = 0; half < 2; ++half) kv_[index(row, l, half)] = word(h, l, half);
        }
      }
      uint64_t f = 0;
      for (int32_t p = 0; p < r.prefix_len + r.extend_len; ++p) f = fold(f, hash_of(t.at(static_cast<size_t>(p))));
      out.push_back({static_cast<int32_t>(f % kVocab), 0.0f, {}, {}});
    }
    return out;
  }

  // ModelRunner::read_kv's layout: per layer, every row's K, then every row's V.
  std::vector<uint8_t> read_kv(std::span<const int32_t> rows, int32_t first, int32_t last) override {
    std::vector<uint8_t> out;
    for (int32_t l = first; l < last; ++l) {
      for (int half = 0; half < 2; ++half) {
        for (int32_t row : rows) {
          const uint64_t w = kv_[index(row, l, half)];
          out.insert(out.end(), reinterpret_cast<const uint8_t*>(&w), reinterpret_cast<const uint8_t*>(&w) + 8);
        }
      }
    }
    return out;
  }
  void write_kv(std::span<const int32_t> rows, int32_t first, int32_t last, std::span<const uint8_t> data) override {
    if (data.size() != rows.size() * static_cast<size_t>(last - first) * 16) throw std::logic_error("write_kv: size");
    size_t at = 0;
    for (int32_t l = first; l < last; ++l) {
      for (int half = 0; half < 2; ++half) {
        for (int32_t row : rows) {
          std::memcpy(&kv_[index(row, l, half)], data.data() + at, 8);
          at += 8;
        }
      }
    }
  }

 private:
  size_t index(int32_t row, int32_t layer, int half) const {
    return (static_cast<size_t>(row) * kLayers + static_cast<size_t>(layer)) * 2 + static_cast<size_t>(half);
  }
  // The hash a row holds, after checking that its layers agree.
  uint64_t hash_of(int32_t row) const {
    const uint64_t h = kv_[index(row, 0, 0)] ^ word(0, 0, 0);
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int half = 0; half < 2; ++half) {
        if (kv_[index(row, l, half)] != word(h, l, half)) throw std::logic_error("a KV row's layers disagree");
      }
    }
    return h;
  }

  std::vector<uint64_t> kv_;
  std::map<int32_t, std::vector<int32_t>> table_;
};

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("actorlm-kvtiers-" + std::to_string(std::random_device{}()));
  ~TempDir() { fs::remove_all(path); }
};

// A 60-token prompt whose KV is random bytes in rows 0..63 of a stand-in
// worker's pool, and what each of its three whole blocks holds.
struct PromptInPool {
  HashWorker worker{64};
  Ids rows = Ids(64), prompt = Ids(60);
  std::vector<std::vector<uint8_t>> expected;
  explicit PromptInPool(uint32_t seed) {
    std::mt19937 rng(seed);
    for (int32_t i = 0; i < 64; ++i) rows[static_cast<size_t>(i)] = i;
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % kVocab);
    std::vector<uint8_t> pool(rows.size() * kLayers * kTokenBytes);
    for (auto& x : pool) x = static_cast<uint8_t>(rng());
    worker.write_kv(rows, 0, kLayers, pool);
    for (int32_t k = 0; k < 3; ++k) {
      expected.push_back(worker.read_kv(std::span(rows).subspan(static_cast<size_t>(k) * 16, 16), 0, kLayers));
    }
  }
};

}  // namespace

TEST_CASE("10,000 random operations over the pool, host and disk tiers keep every invariant and every output right",
          "[scheduler]") {
  const int32_t page = GENERATE(1, 4, 16);
  const auto policy = GENERATE(HiCacheWritePolicy::write_through, HiCacheWritePolicy::write_back);
  INFO("page " << page << ", " << write_policy_name(policy));
  TempDir dir;
  const KvBlockLayout layout{"hash model", "f32", kLayers, kTokenBytes, 16};
  // Room for about six blocks in RAM and twenty on disk, a pool of 256 rows:
  // everything is always being pushed down a tier.
  auto host = std::make_shared<KvHostStore>(layout, 6 * (layout.block_bytes() + 64 * 4), KvHostDtype::same);
  auto disk = std::make_shared<KvDiskStore>(dir.path.string(), layout, 20 * (layout.block_bytes() + 400));
  SchedulerConfig sc;
  sc.max_running_requests = 6;
  sc.max_prefill_tokens = 128;
  sc.chunked_prefill_size = page == 4 ? 24 : 0;
  sc.max_context = 200;
  sc.tiers = std::make_shared<KvTiers>(host, disk, policy);
  LocalKvService kv(KvStoreConfig{256, page, 16, 200, false});
  HashWorker worker(kv.store().allocator().pool_rows());
  Scheduler scheduler(sc, kv, worker);

  std::mt19937 rng(static_cast<uint32_t>(page * 2 + (policy == HiCacheWritePolicy::write_back)));
  auto random_tokens = [&](size_t n) {
    Ids t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % 40);
    return t;
  };
  std::vector<Ids> bases;
  for (int i = 0; i < 5; ++i) bases.push_back(random_tokens(16 + rng() % 60));
  std::vector<Ids> asked;  // earlier prompts, asked again now and then
  std::map<uint64_t, std::pair<Ids, int32_t>> live;  // id -> prompt, max_new
  std::map<uint64_t, Ids> produced;
  uint64_t next_id = 1;
  int64_t completed = 0, damaged = 0;

  auto on_events = [&](const std::vector<TokenEvent>& events) {
    for (const auto& e : events) {
      if (e.token >= 0) produced[e.id].push_back(e.token);
      if (e.finish == FinishReason::none) continue;
      auto it = live.find(e.id);
      REQUIRE(it != live.end());
      REQUIRE(e.finish != FinishReason::error);
      if (e.finish == FinishReason::length) {
        REQUIRE(produced[e.id] == expected_output(it->second.first, static_cast<size_t>(it->second.second)));
        ++completed;
      }
      live.erase(it);
      produced.erase(e.id);
    }
  };
  auto check = [&] {
    REQUIRE(kv.check_running(scheduler.running_kv()) == "");
    REQUIRE(sc.tiers->check() == "");
  };

  for (int op = 0; op < 10000; ++op) {
    const unsigned r = rng() % 100;
    if (r < 30) {
      Ids prompt;
      if (!asked.empty() && rng() % 3 == 0) {
        prompt = asked[rng() % asked.size()];
      } else {
        prompt = bases[rng() % bases.size()];
        Ids tail = random_tokens(rng() % 50);
        prompt.insert(prompt.end(), tail.begin(), tail.end());
        asked.push_back(prompt);
        if (asked.size() > 40) asked.erase(asked.begin());
      }
      Request q;
      q.id = next_id++;
      q.prompt = prompt;
      q.sampling.temperature = 0;
      q.stop.max_new_tokens = 1 + static_cast<int32_t>(rng() % 5);
      REQUIRE_FALSE(scheduler.submit(q));
      live[q.id] = {prompt, q.stop.max_new_tokens};
    } else if (r < 85) {
      on_events(scheduler.step());
    } else if (r < 89) {
      if (!live.empty()) {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        scheduler.abort(it->first);
      }
    } else if (r < 93) {
      kv.flush_cache();
    } else if (r < 96) {
      host->clear();
    } else {
      // Damage one disk block: a byte in its data flipped, or its end cut off.
      std::vector<fs::path> files;
      for (const auto& f : fs::directory_iterator(dir.path)) files.push_back(f.path());
      if (!files.empty()) {
        const fs::path victim = files[rng() % files.size()];
        const auto size = fs::file_size(victim);
        if (rng() % 2) {
          std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
          f.seekg(static_cast<std::streamoff>(size - 1 - rng() % 64));
          char c = 0;
          f.read(&c, 1);
          f.seekp(-1, std::ios::cur);
          c = static_cast<char>(c ^ 0x5a);
          f.write(&c, 1);
        } else {
          fs::resize_file(victim, size - 10);
        }
        ++damaged;
      }
    }
    check();
  }
  for (int s = 0; s < 10000 && !scheduler.idle(); ++s) {
    on_events(scheduler.step());
    check();
  }
  INFO("waiting " << scheduler.waiting() << ", running " << scheduler.running() << ", live " << live.size()
                  << ", completed " << completed);
  REQUIRE(scheduler.idle());
  CHECK(live.empty());
  CHECK(kv.check_idle() == "");
  const SchedulerStats& st = scheduler.stats();
  INFO("completed " << completed << ", host hits " << st.host_hit_tokens << ", disk hits " << st.disk_hit_tokens
                    << ", disk rejected " << disk->stats().rejected << ", host let go " << host->stats().evicted);
  CHECK(completed > 500);
  CHECK(st.host_hit_tokens > 1000);
  CHECK(st.disk_hit_tokens > 1000);
  CHECK(host->stats().evicted > 100);
  CHECK(disk->stats().rejected > 10);
  CHECK(damaged > 100);
}

TEST_CASE("The tiers store on their own thread, and a block still on its way loads bit-identical from the queue",
          "[scheduler]") {
  TempDir dir;
  const KvBlockLayout layout{"hash model", "f32", kLayers, kTokenBytes, 16};
  auto host = std::make_shared<KvHostStore>(layout, 8 * (layout.block_bytes() + 64 * 4), KvHostDtype::same);
  auto disk = std::make_shared<KvDiskStore>(dir.path.string(), layout, 8 * (layout.block_bytes() + 400));
  KvTiers tiers(host, disk, HiCacheWritePolicy::write_through);
  HashWorker worker(64);
  std::mt19937 rng(7);
  auto random_bytes = [&](size_t n) {
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    return b;
  };
  Ids rows(48), prompt(48);
  for (int32_t i = 0; i < 48; ++i) {
    rows[static_cast<size_t>(i)] = 63 - i;  // not in order: blocks are cut by position, not row
    prompt[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % kVocab);
  }
  worker.write_kv(rows, 0, kLayers, random_bytes(rows.size() * kLayers * kTokenBytes));
  std::vector<std::vector<uint8_t>> expected;
  for (int32_t k = 0; k < 3; ++k) expected.push_back(worker.read_kv(std::span(rows).subspan(static_cast<size_t>(k) * 16, 16), 0, kLayers));

  // The I/O thread held back: the prefill's write-through returns with its
  // three blocks read out of the pool and queued, none stored yet.
  tiers.pause_io(true);
  tiers.after_prefill(worker, prompt, rows);
  CHECK(tiers.pending_blocks() == 3);
  CHECK(tiers.host_stats()->stored == 0);
  CHECK(tiers.disk_stats()->stored == 0);
  // The rows go to another request; the queue holds what they were.
  worker.write_kv(rows, 0, kLayers, random_bytes(rows.size() * kLayers * kTokenBytes));
  for (int32_t k = 0; k < 3; ++k) {
    auto got = tiers.load(prompt, k);
    REQUIRE(got);
    CHECK(got->tier == KvTier::host);
    CHECK(got->data == expected[static_cast<size_t>(k)]);
  }
  // Queued blocks are not queued twice.
  tiers.after_prefill(worker, prompt, rows);
  CHECK(tiers.pending_blocks() == 3);

  tiers.pause_io(false);
  tiers.drain();
  CHECK(tiers.pending_blocks() == 0);
  CHECK(tiers.host_stats()->stored == 3);
  CHECK(tiers.disk_stats()->stored == 3);
  // Every store ran on one thread, and not on the caller's.
  const auto threads = tiers.store_threads();
  REQUIRE(threads.size() == 1);
  CHECK(*threads.begin() != std::this_thread::get_id());
  CHECK(tiers.check() == "");
  // What reached each tier is what the pool held when it was queued.
  for (int32_t k = 0; k < 3; ++k) {
    auto got = tiers.load(prompt, k);
    REQUIRE(got);
    CHECK(got->tier == KvTier::host);
    CHECK(got->data == expected[static_cast<size_t>(k)]);
  }
  KvTiers disk_only(nullptr, std::make_shared<KvDiskStore>(dir.path.string(), layout, 8 * (layout.block_bytes() + 400)),
                    HiCacheWritePolicy::write_through);
  for (int32_t k = 0; k < 3; ++k) {
    auto got = disk_only.load(prompt, k);
    REQUIRE(got);
    CHECK(got->tier == KvTier::disk);
    CHECK(got->data == expected[static_cast<size_t>(k)]);
  }
}

TEST_CASE("A prefetch reads a waiting prompt's disk blocks ahead, and its load takes them from memory", "[scheduler]") {
  TempDir dir;
  const KvBlockLayout layout{"hash model", "f32", kLayers, kTokenBytes, 16};
  PromptInPool in_pool(11);
  auto& [worker, rows, prompt, expected] = in_pool;
  {
    KvTiers writer(nullptr, std::make_shared<KvDiskStore>(dir.path.string(), layout, int64_t{1} << 20),
                   HiCacheWritePolicy::write_through);
    writer.after_prefill(worker, prompt, rows);  // 3 whole blocks of the 60 tokens
  }
  // A restart: a disk tier over the same folder.
  auto disk = std::make_shared<KvDiskStore>(dir.path.string(), layout, int64_t{1} << 20);
  KvTiers tiers(nullptr, disk, HiCacheWritePolicy::write_through);
  // The pool holds the first block already: blocks 1 and 2 are read ahead.
  tiers.prefetch(prompt, 1);
  tiers.drain();
  CHECK(tiers.prefetched_blocks() == 2);
  CHECK(disk->stats().loaded == 2);
  // Gone from the folder now: the load is served from memory all the same.
  for (const auto& f : fs::directory_iterator(dir.path)) fs::remove(f.path());
  for (int32_t k = 1; k < 3; ++k) {
    auto got = tiers.load(prompt, k);
    REQUIRE(got);
    CHECK(got->tier == KvTier::disk);
    CHECK(got->data == expected[static_cast<size_t>(k)]);
  }
  CHECK(tiers.prefetched_blocks() == 0);
  CHECK_FALSE(tiers.load(prompt, 0));  // never read ahead, and the file is gone
  // A prompt whose chain the disk lacks: nothing read.
  Ids other = prompt;
  other[3] ^= 1;
  tiers.prefetch(other, 0);
  tiers.drain();
  CHECK(tiers.prefetched_blocks() == 0);
  CHECK(disk->stats().loaded == 2);
}

TEST_CASE("A prefetch decodes a waiting prompt's host blocks on the I/O thread, and an admitted prompt's is dropped", "[scheduler]") {
  const KvBlockLayout layout{"hash model", "f32", kLayers, kTokenBytes, 16};
  PromptInPool in_pool(12);
  auto& [worker, rows, prompt, expected] = in_pool;
  KvTiers tiers(std::make_shared<KvHostStore>(layout, int64_t{1} << 20, KvHostDtype::same), nullptr,
                HiCacheWritePolicy::write_through);
  tiers.after_prefill(worker, prompt, rows);
  tiers.drain();

  // Queued behind a paused I/O thread: under way as far as a policy cares.
  tiers.pause_io(true);
  tiers.prefetch(prompt, 0);
  CHECK(tiers.prefetching(prompt));
  Ids other = prompt;
  other[3] ^= 1;
  CHECK_FALSE(tiers.prefetching(other));
  tiers.pause_io(false);
  tiers.drain();
  CHECK_FALSE(tiers.prefetching(prompt));
  CHECK(tiers.prefetched_blocks() == 3);
  // Decoded there, not here; and a load takes the staged block, reading no tier.
  auto readers = tiers.read_threads();
  REQUIRE(readers.size() == 1);
  CHECK(*readers.begin() != std::this_thread::get_id());
  auto got = tiers.load(prompt, 0);
  REQUIRE(got);
  CHECK(got->tier == KvTier::host);
  CHECK(got->data == expected[0]);
  CHECK(tiers.read_threads() == readers);
  // Admitted: what it did not take is let go, and the next load reads the tier here.
  tiers.drop_prefetch(prompt);
  CHECK(tiers.prefetched_blocks() == 0);
  got = tiers.load(prompt, 1);
  REQUIRE(got);
  CHECK(got->data == expected[1]);
  CHECK(tiers.read_threads().count(std::this_thread::get_id()) == 1);

  // A prefetch dropped before it ran reads nothing.
  const int64_t loaded = tiers.host_stats()->loaded;
  tiers.pause_io(true);
  tiers.prefetch(prompt, 0);
  tiers.drop_prefetch(prompt);
  CHECK_FALSE(tiers.prefetching(prompt));
  tiers.pause_io(false);
  tiers.drain();
  CHECK(tiers.prefetched_blocks() == 0);
  CHECK(tiers.host_stats()->loaded == loaded);
  CHECK(tiers.check() == "");
}
