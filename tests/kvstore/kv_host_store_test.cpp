// The host tier of the KV cache: blocks stored and copied back exactly (or
// within the stated error of a smaller element type), found only under the
// whole prompt that made them, kept within capacity by letting the least
// recently used go (to the tier below when asked), and its accounting exact
// after every one of 10,000 random operations.

#include "kvstore/kv_host_store.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "kernels/half.hpp"

using namespace actorlm;

namespace {

// f32 pool; 32 floats per token half, so q8_0 can encode it. 2 KiB a block.
const KvBlockLayout kF32{"model A", "f32", 2, 256, 4};
const KvBlockLayout kF16{"model A", "f16", 2, 128, 4};
const KvBlockLayout kBF16{"model A", "bf16", 2, 128, 4};

uint16_t to_bf16(float v) {  // truncation: any bf16 value will do for test data
  uint32_t x;
  std::memcpy(&x, &v, 4);
  return static_cast<uint16_t>(x >> 16);
}

std::vector<uint8_t> floats_of(const KvBlockLayout& l, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<uint8_t> d(static_cast<size_t>(l.block_bytes()));
  for (size_t i = 0; i < d.size(); i += l.dtype == "f32" ? 4 : 2) {
    const float v = dist(rng);
    if (l.dtype != "f32") {
      const uint16_t h = l.dtype == "f16" ? f32_to_f16(v) : to_bf16(v);
      std::memcpy(d.data() + i, &h, 2);
    } else {
      std::memcpy(d.data() + i, &v, 4);
    }
  }
  return d;
}

float at(const std::vector<uint8_t>& d, const KvBlockLayout& l, size_t i) {
  if (l.dtype != "f32") {
    uint16_t h;
    std::memcpy(&h, d.data() + i * 2, 2);
    return l.dtype == "f16" ? f16_to_f32(h) : bf16_to_f32(h);
  }
  float f;
  std::memcpy(&f, d.data() + i * 4, 4);
  return f;
}

// Largest |a - b| over a block, and the largest |a| in the 32-element group
// of each element (q8_0's error bound is half its scale, amax / 254, plus
// the half scale's own rounding).
void expect_within(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got, const KvBlockLayout& l,
                   KvHostDtype dtype) {
  REQUIRE(got.size() == want.size());
  const size_t n = want.size() / (l.dtype == "f32" ? 4 : 2);
  for (size_t g = 0; g < n / 32; ++g) {
    float amax = 0;
    for (size_t i = g * 32; i < g * 32 + 32; ++i) amax = std::max(amax, std::fabs(at(want, l, i)));
    for (size_t i = g * 32; i < g * 32 + 32; ++i) {
      const float a = at(want, l, i), b = at(got, l, i);
      // q8_0: half a step of the scale, the scale's own rounding, and a bf16
      // pool's rounding of the result (2^-9 relative).
      const float bound = dtype == KvHostDtype::q8_0
                              ? amax / 254.0f * 1.01f + amax * 1e-3f + std::fabs(a) * (1.0f / 256.0f) + 1e-6f
                              : std::fabs(a) * (1.0f / 2048.0f) + 1e-7f;
      if (std::fabs(a - b) > bound) FAIL("element " << i << ": " << a << " came back as " << b);
    }
  }
}

int64_t block_bytes_in(const KvBlockLayout& l, KvHostDtype d) {
  return KvHostStore(l, 1 << 30, d).encoded_block_bytes();
}

std::vector<int32_t> prompt_of(int32_t n, int32_t first) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), first);
  return p;
}

}  // namespace

TEST_CASE("The host tier gives back exactly what it stored, under the whole prompt only", "[kvstore]") {
  KvHostStore s(kF32, 1 << 20, KvHostDtype::same);
  auto p = prompt_of(12, 100);
  auto b0 = floats_of(kF32, 1), b2 = floats_of(kF32, 3);
  // Write-back stores what eviction hands it: a block without its parent is fine.
  CHECK(s.store(p, 2, b2));
  CHECK(s.store(p, 0, b0));
  CHECK_FALSE(s.store(p, 0, b0));                                  // here already
  CHECK_FALSE(s.store(p, 3, b0));                                  // outside the prompt
  CHECK_FALSE(s.store(p, 1, std::span(b0).first(b0.size() - 1)));  // short data
  CHECK(s.contains(p, 0));
  CHECK_FALSE(s.contains(p, 1));
  CHECK(s.load(p, 2) == b2);
  CHECK(s.peek(p, 0) == b0);
  // A prompt that differs before the block names another block.
  auto other = p;
  other[1] = 7;
  CHECK_FALSE(s.contains(other, 2));
  CHECK_FALSE(s.load(other, 2));
  // Another layout (model) never sees these blocks.
  KvBlockLayout b_layout = kF32;
  b_layout.model_digest = "model B";
  CHECK(kv_block_key(kF32, p, 0) != kv_block_key(b_layout, p, 0));
  CHECK(s.stats().stored == 2);
  CHECK(s.stats().loaded == 1);
  CHECK(s.check().empty());
}

TEST_CASE("Smaller element types hold more blocks and stay within their stated error", "[kvstore]") {
  for (const KvBlockLayout& l : {kF32, kF16, kBF16}) {
    for (KvHostDtype d : {KvHostDtype::f16, KvHostDtype::q8_0}) {
      if (l.dtype == "bf16" && d == KvHostDtype::f16) {
        CHECK_THROWS_AS(KvHostStore(l, 1 << 20, d), std::invalid_argument);  // it would save nothing
        continue;
      }
      KvHostStore s(l, 1 << 20, d);
      INFO(l.dtype << " pool, " << kv_host_dtype_name(d));
      const auto elems = static_cast<int64_t>(l.block_bytes()) / (l.dtype == "f32" ? 4 : 2);
      CHECK(s.encoded_block_bytes() == (d == KvHostDtype::f16 ? elems * 2 : elems / 32 * 34));
      auto p = prompt_of(8, 0);
      for (int32_t b = 0; b < 2; ++b) {
        auto data = floats_of(l, 10 + static_cast<uint32_t>(b));
        REQUIRE(s.store(p, b, data));
        auto back = s.load(p, b);
        REQUIRE(back);
        if (d == KvHostDtype::f16 && l.dtype == "f16") {
          CHECK(*back == data);  // nothing to round
        } else {
          expect_within(data, *back, l, d);
          CHECK(*back != data);  // it is lossy: the test would notice a copy
        }
      }
      CHECK(s.check().empty());
    }
  }
  // q8_0 needs whole groups of 32 per token half.
  CHECK_THROWS_AS(KvHostStore(KvBlockLayout{"m", "f32", 2, 200, 4}, 1 << 20, KvHostDtype::q8_0),
                  std::invalid_argument);
  CHECK_THROWS_AS(KvHostStore(KvBlockLayout{"m", "q4", 2, 256, 4}, 1 << 20, KvHostDtype::f16), std::invalid_argument);
  CHECK_THROWS_AS(KvHostStore(kF32, 100, KvHostDtype::same), std::invalid_argument);
  CHECK(kv_host_dtype_from("q8_0") == KvHostDtype::q8_0);
  CHECK_FALSE(kv_host_dtype_from("q4_0"));
}

TEST_CASE("A full host tier lets the least recently used block go, to the tier below when asked", "[kvstore]") {
  auto p = prompt_of(16, 0);
  // Room for three blocks with their prompts (block d counts 16 (d+1) bytes of tokens).
  const int64_t cap = 3 * kF32.block_bytes() + 16 * (1 + 2 + 3) ;
  KvHostStore s(kF32, cap, KvHostDtype::same);
  std::vector<KvDemotedBlock> down;
  REQUIRE(s.store(p, 0, floats_of(kF32, 0), &down));
  REQUIRE(s.store(p, 1, floats_of(kF32, 1), &down));
  REQUIRE(s.store(p, 2, floats_of(kF32, 2), &down));
  CHECK(down.empty());
  REQUIRE(s.load(p, 0));  // block 0 is now the most recent: block 1 goes first
  REQUIRE(s.store(p, 3, floats_of(kF32, 3), &down));
  REQUIRE(down.size() == 2);  // block 3 needs 16 more bytes of tokens than block 1 freed
  CHECK(down[0].block == 1);
  CHECK(down[0].prompt == std::vector<int32_t>(p.begin(), p.begin() + 8));
  CHECK(down[0].data == floats_of(kF32, 1));
  CHECK(down[1].block == 2);
  CHECK(s.contains(p, 0));
  CHECK(s.contains(p, 3));
  CHECK(s.stats().evicted == 2);
  CHECK(s.stats().bytes <= cap);
  CHECK(s.check().empty());
  CHECK(s.clear() == 2);
  CHECK(s.stats().bytes == 0);
  CHECK(s.check().empty());
}

TEST_CASE("10,000 random operations keep the host tier's accounting exact and its data right", "[kvstore]") {
  for (KvHostDtype d : {KvHostDtype::same, KvHostDtype::q8_0}) {
    for (int32_t block_tokens : {1, 4, 16}) {
      KvBlockLayout l = kF32;
      l.block_tokens = block_tokens;
      INFO(kv_host_dtype_name(d) << ", blocks of " << block_tokens << " tokens");
      std::mt19937 rng(static_cast<uint32_t>(block_tokens) * 31 + (d == KvHostDtype::same ? 0 : 7));
      // Six prompts of five blocks; later ones share leading blocks with earlier ones.
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < 6; ++i) {
        std::vector<int32_t> p(static_cast<size_t>(5 * block_tokens));
        for (auto& t : p) t = static_cast<int32_t>(rng() % 50);
        if (i > 0) {
          const size_t shared = static_cast<size_t>(block_tokens) * (rng() % 4);
          std::copy(prompts[i - 1].begin(), prompts[i - 1].begin() + static_cast<std::ptrdiff_t>(shared), p.begin());
        }
        prompts.push_back(std::move(p));
      }
      // A block's data follows from its whole prefix, so any block that comes
      // back (loaded or let go) can be checked against what was stored.
      auto seed_of = [](std::span<const int32_t> prefix) {
        uint32_t h = 2166136261u;
        for (int32_t t : prefix) h = (h ^ static_cast<uint32_t>(t)) * 16777619u;
        return h;
      };
      auto prefix_of = [&](const std::vector<int32_t>& p, int32_t b) {
        return std::vector<int32_t>(p.begin(), p.begin() + (b + 1) * block_tokens);
      };
      auto expect_data = [&](const std::vector<int32_t>& prefix, const std::vector<uint8_t>& got) {
        auto want = floats_of(l, seed_of(prefix));
        if (d == KvHostDtype::same) {
          REQUIRE(got == want);
        } else {
          expect_within(want, got, l, d);
        }
      };
      KvHostStore s(l, 12 * (block_bytes_in(l, d)) + 4 * 5 * block_tokens * 12, d);
      std::set<std::vector<int32_t>> held;  // the model: prefixes whose block is here
      int64_t loads = 0, demotions = 0, clears = 0, refusals = 0;
      for (int op = 0; op < 10000; ++op) {
        const auto& p = prompts[rng() % prompts.size()];
        const auto b = static_cast<int32_t>(rng() % 5);
        const auto prefix = prefix_of(p, b);
        const unsigned r = rng() % 100;
        if (r < 45) {
          std::vector<KvDemotedBlock> down;
          const int64_t refused_before = s.stats().refused;
          const bool stored = s.store(p, b, floats_of(l, seed_of(prefix)), &down);
          const bool refused = s.stats().refused > refused_before;
          REQUIRE(s.stats().refused <= refused_before + 1);
          REQUIRE(stored == (!held.count(prefix) && !refused));
          if (refused) {
            // Handed down whole, and nothing else let go.
            REQUIRE(!held.count(prefix));
            REQUIRE(down.size() == 1);
            REQUIRE(down[0].prompt == prefix);
            REQUIRE(down[0].block == b);
            REQUIRE(down[0].data == floats_of(l, seed_of(prefix)));
            ++refusals;
            down.clear();
          }
          for (const auto& x : down) {
            REQUIRE(held.erase(x.prompt) == 1);
            REQUIRE(x.prompt.size() == static_cast<size_t>((x.block + 1) * block_tokens));
            expect_data(x.prompt, x.data);
            ++demotions;
          }
          if (stored) held.insert(prefix);
        } else if (r < 95) {
          auto got = r < 85 ? s.load(p, b) : s.peek(p, b);
          REQUIRE(got.has_value() == (held.count(prefix) == 1));
          if (got) {
            expect_data(prefix, *got);
            ++loads;
          }
        } else if (r < 96) {
          REQUIRE(s.clear() == static_cast<int64_t>(held.size()));
          held.clear();
          ++clears;
        } else {
          REQUIRE(s.contains(p, b) == (held.count(prefix) == 1));
        }
        REQUIRE(s.check() == "");
        REQUIRE(s.stats().blocks == static_cast<int64_t>(held.size()));
        REQUIRE(s.stats().bytes <= s.stats().capacity_bytes);
      }
      CHECK(loads > 1000);
      // (Fewer let go than under plain LRU: blocks back after being let go
      // are refused while the next one out has been loaded.)
      CHECK(demotions > 10);
      CHECK(refusals > 10);
      CHECK(clears > 10);
    }
  }
}

TEST_CASE("Prompts coming back in a cycle longer than the host tier still hit for the part it holds", "[kvstore]") {
  // Six prompts of four blocks, round-robin, a tier with room for twelve
  // blocks: half the cycle. Each round, every prompt is looked up block by
  // block and then stored (as write-through does after a prefill).
  KvBlockLayout l = kF32;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(4 * l.block_tokens));
    std::iota(p.begin(), p.end(), 100 * i);
    prompts.push_back(std::move(p));
  }
  KvHostStore s(l, 12 * (block_bytes_in(l, KvHostDtype::same) + 4 * 4 * l.block_tokens), KvHostDtype::same);
  int64_t hits = 0, lookups = 0;
  for (int round = 0; round < 10; ++round) {
    for (const auto& p : prompts) {
      for (int32_t b = 0; b < 4; ++b) {
        ++lookups;
        if (auto got = s.load(p, b)) {
          ++hits;
          REQUIRE(*got == floats_of(l, static_cast<uint32_t>(p[0] * 8 + b)));
        } else {
          s.store(p, b, floats_of(l, static_cast<uint32_t>(p[0] * 8 + b)));
        }
      }
      REQUIRE(s.check() == "");
    }
  }
  // LRU alone would hit nothing here: each block is let go just before its
  // prompt comes back. Kept steady, the tier's twelve blocks of the 24 hit
  // in every round after the first two.
  CHECK(hits >= 8 * 12);
  CHECK(s.stats().refused > 0);
  INFO("hits " << hits << " of " << lookups);
  // A stream of new prompts still replaces what is here (they are not ghosts).
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(4 * l.block_tokens));
    std::iota(p.begin(), p.end(), 5000 + 100 * i);
    for (int32_t b = 0; b < 4; ++b) REQUIRE(s.store(p, b, floats_of(l, 9)));
  }
  for (const auto& p : prompts) {
    for (int32_t b = 0; b < 4; ++b) CHECK(!s.contains(p, b));
  }
}

TEST_CASE("Blocks of two lineages are two blocks, whatever their tokens", "[kvstore][lora]") {
  // The base model's KV and a LoRA adapter's for the same prompt differ;
  // each is found only under its own lineage, and goes down with it.
  KvHostStore s(kF32, 3 * (kF32.block_bytes() + 64), KvHostDtype::same);
  const auto p = prompt_of(8, 100);
  const uint64_t a = kv_adapter_lineage("0123456789abcdef", 1.0f);
  const auto base0 = floats_of(kF32, 1), a0 = floats_of(kF32, 2);
  CHECK(a != 0);
  CHECK(a != kv_adapter_lineage("0123456789abcdef", 0.5f));  // the scale it was loaded at counts
  CHECK(a != kv_adapter_lineage("0123456789abcdee", 1.0f));
  CHECK(kv_block_key(kF32, p, 0, a) != kv_block_key(kF32, p, 0));
  REQUIRE(s.store(p, 0, base0));
  CHECK_FALSE(s.contains(p, 0, a));
  CHECK_FALSE(s.load(p, 0, a));
  REQUIRE(s.store(p, 0, a0, nullptr, a));
  CHECK(s.load(p, 0) == base0);
  CHECK(s.load(p, 0, a) == a0);
  CHECK(s.peek(p, 0, a) == a0);
  // A full tier hands the adapter's block down with its lineage.
  std::vector<KvDemotedBlock> down;
  REQUIRE(s.store(p, 1, floats_of(kF32, 3), &down, a));
  REQUIRE(s.store(prompt_of(8, 300), 0, floats_of(kF32, 4), &down));
  REQUIRE(s.store(prompt_of(8, 500), 0, floats_of(kF32, 5), &down));
  REQUIRE(down.size() >= 2);
  CHECK(down[0].lineage == 0);  // base0, the least recently used
  CHECK(down[0].data == base0);
  CHECK(down[1].lineage == a);
  CHECK(down[1].data == a0);
  CHECK(s.check().empty());
}
