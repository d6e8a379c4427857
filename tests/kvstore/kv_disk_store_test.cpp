// The disk tier of the KV cache: blocks written, matched and read back
// byte for byte, found again by a new store on the same folder (a restart),
// and every damaged, foreign or colliding file refused rather than served.

#include "kvstore/kv_disk_store.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

using namespace actorlm;
namespace fs = std::filesystem;

namespace {

const KvBlockLayout kLayout{"model A", "f32", 2, 8, 4};  // 64 bytes a block

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("actorlm-kvdisk-" + std::to_string(std::random_device{}()));
  ~TempDir() { fs::remove_all(path); }
};

std::vector<uint8_t> data_of(int32_t block, uint8_t salt) {
  std::vector<uint8_t> d(static_cast<size_t>(kLayout.block_bytes()));
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 7 + static_cast<size_t>(block) * 13 + salt);
  return d;
}

std::vector<int32_t> prompt_of(int32_t n, int32_t first) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), first);
  return p;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

}  // namespace

TEST_CASE("The disk tier keeps whole blocks of a prompt and finds them again after a restart", "[kvstore]") {
  TempDir dir;
  const auto prompt = prompt_of(14, 100);  // 3 whole blocks and 2 tokens
  {
    KvDiskStore store(dir.path.string(), kLayout, 1 << 20);
    CHECK(store.match(prompt) == 0);
    CHECK_FALSE(store.store(prompt, 1, data_of(1, 0)));  // its parent is not there
    for (int32_t b = 0; b < 3; ++b) CHECK(store.store(prompt, b, data_of(b, 0)));
    CHECK_FALSE(store.store(prompt, 0, data_of(0, 0)));  // once
    CHECK_FALSE(store.store(prompt, 3, data_of(3, 0)));  // not a whole block
    CHECK(store.match(prompt) == 12);
    // A prompt that shares the first block only.
    auto other = prompt;
    other[5] = 9;
    CHECK(store.match(other) == 4);
    CHECK(store.stats().blocks == 3);
  }
  KvDiskStore again(dir.path.string(), kLayout, 1 << 20);
  CHECK(again.stats().blocks == 3);
  CHECK(again.match(prompt) == 12);
  for (int32_t b = 0; b < 3; ++b) {
    std::string error;
    auto got = again.load(prompt, b, &error);
    INFO(error);
    REQUIRE(got);
    CHECK(*got == data_of(b, 0));
  }
  CHECK(again.stats().loaded == 3);
  // Another model's store on the same folder sees none of it, and leaves it.
  KvBlockLayout other_model = kLayout;
  other_model.model_digest = "model B";
  KvDiskStore foreign(dir.path.string(), other_model, 1 << 20);
  CHECK(foreign.stats().blocks == 0);
  CHECK(foreign.stats().foreign == 3);
  CHECK(foreign.match(prompt) == 0);
  CHECK(files_in(dir.path).size() == 3);
}

TEST_CASE("Damaged block files are refused, counted and removed, never served", "[kvstore]") {
  TempDir dir;
  const auto prompt = prompt_of(12, 7);
  {
    KvDiskStore store(dir.path.string(), kLayout, 1 << 20);
    for (int32_t b = 0; b < 3; ++b) REQUIRE(store.store(prompt, b, data_of(b, 1)));
  }
  KvDiskStore probe(dir.path.string(), kLayout, 1 << 20);
  auto file_of = [&](int32_t b) {
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.kvb", static_cast<unsigned long long>(probe.key(prompt, b)));
    return dir.path / name;
  };
  SECTION("a flipped data byte fails the CRC on load") {
    {
      std::fstream f(file_of(2), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-5, std::ios::end);
      f.put('\x5a');
    }
    KvDiskStore store(dir.path.string(), kLayout, 1 << 20);
    CHECK(store.match(prompt) == 12);  // the header is sound
    std::string error;
    CHECK_FALSE(store.load(prompt, 2, &error));
    CHECK(error == "data fails its CRC");
    CHECK(store.stats().rejected == 1);
    CHECK_FALSE(fs::exists(file_of(2)));
    CHECK(store.match(prompt) == 8);
  }
  SECTION("a truncated file is refused when the folder is indexed") {
    fs::resize_file(file_of(1), fs::file_size(file_of(1)) - 3);
    KvDiskStore store(dir.path.string(), kLayout, 1 << 20);
    CHECK(store.stats().rejected == 1);
    CHECK(store.match(prompt) == 4);  // block 2 is unreachable without block 1
  }
  SECTION("a block renamed to another key, or garbage with the extension, is refused") {
    fs::rename(file_of(1), file_of(2));  // block 2 replaced by block 1's bytes
    { std::ofstream(dir.path / "0123456789abcdef.kvb") << "not a block"; }
    KvDiskStore store(dir.path.string(), kLayout, 1 << 20);
    CHECK(store.stats().rejected == 2);
    CHECK(store.match(prompt) == 4);
  }
}

TEST_CASE("The disk tier stays within its capacity, dropping the least recently used blocks", "[kvstore]") {
  TempDir dir;
  const int64_t file_bytes = [&] {
    KvDiskStore probe(dir.path.string(), kLayout, 1 << 20);
    REQUIRE(probe.store(prompt_of(4, 0), 0, data_of(0, 0)));
    return probe.stats().bytes;
  }();
  fs::remove_all(dir.path);
  KvDiskStore store(dir.path.string(), kLayout, 3 * file_bytes);
  const auto a = prompt_of(8, 1000), b = prompt_of(8, 2000);
  REQUIRE(store.store(a, 0, data_of(0, 2)));
  REQUIRE(store.store(a, 1, data_of(1, 2)));
  REQUIRE(store.store(b, 0, data_of(0, 3)));
  CHECK(store.match(a) == 8);  // a is now more recent than b
  REQUIRE(store.store(a, 1, data_of(1, 2)) == false);
  // One block must go. b's first is the parent of the block being written,
  // so it counts as used now; of a's two, equally recent, the deeper goes.
  REQUIRE(store.store(b, 1, data_of(1, 3)));
  CHECK(store.stats().blocks == 3);
  CHECK(store.stats().evicted == 1);
  CHECK(store.stats().bytes <= 3 * file_bytes);
  CHECK(store.match(a) == 4);
  CHECK(store.match(b) == 8);
  CHECK(files_in(dir.path).size() == 3);
  // A smaller capacity on restart trims at once.
  KvDiskStore smaller(dir.path.string(), kLayout, file_bytes);
  CHECK(smaller.stats().blocks == 1);
  CHECK(files_in(dir.path).size() == 1);
}

TEST_CASE("10,000 random operations keep the disk tier's accounting exact and never serve a wrong byte", "[kvstore]") {
  // Prompts from a 3-token alphabet share prefixes often; blocks are stored,
  // matched, loaded, damaged (one byte flipped anywhere in a file) and the
  // store reopened, in random order. After every operation the index must
  // agree with the folder (blocks, bytes) and stay within capacity; a load
  // returns exactly what was stored for that key, or nothing for a damaged
  // file, which is then gone.
  TempDir dir;
  std::mt19937 rng(1234);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> p(4 + rng() % 29);
    for (auto& t : p) t = static_cast<int32_t>(rng() % 3);
    prompts.push_back(p);
  }
  auto bytes_for_key = [](uint64_t key) {
    std::vector<uint8_t> d(static_cast<size_t>(kLayout.block_bytes()));
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>((key >> (8 * (i % 8))) + i);
    return d;
  };
  const int64_t file_bytes = [&] {
    TempDir probe_dir;
    KvDiskStore probe(probe_dir.path.string(), kLayout, 1 << 20);
    REQUIRE(probe.store(prompt_of(4, 0), 0, data_of(0, 0)));
    return probe.stats().bytes;
  }();
  const int64_t capacity = 12 * file_bytes;  // fewer than the prompts' distinct blocks
  auto store = std::make_unique<KvDiskStore>(dir.path.string(), kLayout, capacity);
  std::set<uint64_t> damaged;
  int64_t loads = 0, refusals = 0, restarts = 0, evicted = 0;
  for (int op = 0; op < 10000; ++op) {
    const auto& p = prompts[rng() % prompts.size()];
    const int32_t blocks = static_cast<int32_t>(p.size() / 4);
    const unsigned kind = rng() % 100;
    if (kind < 40) {  // store the next block the store lacks
      const int32_t next = store->match(p) / 4;
      if (next < blocks) store->store(p, next, bytes_for_key(store->key(p, next)));
    } else if (kind < 80) {  // load a matched block
      const int32_t have = store->match(p) / 4;
      CHECK(have <= blocks);
      if (have > 0) {
        const int32_t b = static_cast<int32_t>(rng() % static_cast<unsigned>(have));
        const uint64_t key = store->key(p, b);
        auto got = store->load(p, b, nullptr);
        if (damaged.count(key)) {
          REQUIRE_FALSE(got);
          damaged.erase(key);
          ++refusals;
        } else {
          REQUIRE(got);
          REQUIRE(*got == bytes_for_key(key));
          ++loads;
        }
      }
    } else if (kind < 95) {  // flip one byte of a block file
      auto files = files_in(dir.path);
      if (!files.empty()) {
        const fs::path f = files[rng() % files.size()];
        const auto size = fs::file_size(f);
        std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
        const auto at = static_cast<std::streamoff>(rng() % size);
        io.seekg(at);
        const char c = static_cast<char>(io.get());
        io.seekp(at);
        io.put(static_cast<char>(c ^ (1 << (rng() % 8))));
        damaged.insert(std::stoull(f.stem().string(), nullptr, 16));
      }
    } else {  // restart
      evicted += store->stats().evicted;
      store.reset();
      store = std::make_unique<KvDiskStore>(dir.path.string(), kLayout, capacity);
      ++restarts;
    }
    // A damaged file that is gone (its header refused while indexing, or
    // evicted for room) may come back later, written afresh.
    for (auto it = damaged.begin(); it != damaged.end();) {
      char name[32];
      std::snprintf(name, sizeof name, "%016llx.kvb", static_cast<unsigned long long>(*it));
      it = fs::exists(dir.path / name) ? std::next(it) : damaged.erase(it);
    }
    // The index agrees with the folder.
    int64_t on_disk = 0;
    auto files = files_in(dir.path);
    for (const auto& f : files) on_disk += static_cast<int64_t>(fs::file_size(f));
    INFO("operation " << op);
    REQUIRE(store->stats().blocks == static_cast<int64_t>(files.size()));
    REQUIRE(store->stats().bytes == on_disk);
    REQUIRE(store->stats().bytes <= capacity);
    REQUIRE(store->check() == "");
  }
  CHECK(loads > 1000);
  CHECK(refusals > 50);
  CHECK(restarts > 200);
  CHECK(evicted + store->stats().evicted > 100);
}

TEST_CASE("An adapter's blocks are found only under its lineage, also after a restart", "[kvstore][lora]") {
  TempDir dir;
  const auto prompt = prompt_of(12, 100);
  const uint64_t a = kv_adapter_lineage("0123456789abcdef", 1.0f);
  {
    KvDiskStore store(dir.path.string(), kLayout, 1 << 20);
    for (int32_t b = 0; b < 3; ++b) REQUIRE(store.store(prompt, b, data_of(b, 1), a));
    CHECK(store.match(prompt) == 0);
    CHECK(store.match(prompt, a) == 12);
    CHECK_FALSE(store.contains(prompt, 0));
    CHECK_FALSE(store.load(prompt, 0, nullptr));
    // The base model's blocks of the same prompt sit beside them.
    for (int32_t b = 0; b < 2; ++b) REQUIRE(store.store(prompt, b, data_of(b, 0)));
    CHECK(store.match(prompt) == 8);
    CHECK(store.stats().blocks == 5);
  }
  // A restart indexes both; each lineage gets its own bytes back.
  KvDiskStore again(dir.path.string(), kLayout, 1 << 20);
  CHECK(again.stats().blocks == 5);
  CHECK(again.stats().rejected == 0);
  CHECK(again.match(prompt, a) == 12);
  CHECK(again.match(prompt) == 8);
  CHECK(again.match(prompt, kv_adapter_lineage("0123456789abcdef", 2.0f)) == 0);
  for (int32_t b = 0; b < 3; ++b) {
    std::string error;
    auto got = again.load(prompt, b, &error, a);
    INFO(error);
    REQUIRE(got);
    CHECK(*got == data_of(b, 1));
  }
  auto base = again.load(prompt, 0, nullptr);
  REQUIRE(base);
  CHECK(*base == data_of(0, 0));
  CHECK(again.check().empty());
}
