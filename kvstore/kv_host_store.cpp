#include "kvstore/kv_host_store.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/half.hpp"

namespace actorlm {
namespace {

constexpr size_t q8_group = 32;
constexpr size_t q8_group_bytes = 2 + q8_group;  // half scale + 32 int8

// Round to nearest even; NaN stays NaN.
uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float element(const uint8_t* p, KvElement e) {
  if (e == KvElement::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return e == KvElement::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}

void put_element(uint8_t* p, KvElement e, float v) {
  if (e == KvElement::f32) {
    std::memcpy(p, &v, 4);
    return;
  }
  const uint16_t h = e == KvElement::f16 ? f32_to_f16(v) : f32_to_bf16(v);
  std::memcpy(p, &h, 2);
}

}  // namespace

const char* kv_host_dtype_name(KvHostDtype d) {
  switch (d) {
    case KvHostDtype::same: return "same";
    case KvHostDtype::f16: return "f16";
    case KvHostDtype::q8_0: return "q8_0";
  }
  return "same";
}

std::optional<KvHostDtype> kv_host_dtype_from(std::string_view name) {
  for (KvHostDtype d : {KvHostDtype::same, KvHostDtype::f16, KvHostDtype::q8_0}) {
    if (name == kv_host_dtype_name(d)) return d;
  }
  return std::nullopt;
}

KvHostStore::KvHostStore(KvBlockLayout layout, int64_t capacity_bytes, KvHostDtype dtype)
    : layout_(std::move(layout)), dtype_(dtype) {
  if (layout_.n_layers <= 0 || layout_.token_bytes <= 0 || layout_.token_bytes % 2 != 0 || layout_.block_tokens <= 0) {
    throw std::invalid_argument("KV host tier: a layout of " + std::to_string(layout_.n_layers) + " layers, " +
                                std::to_string(layout_.token_bytes) + " bytes per token and " +
                                std::to_string(layout_.block_tokens) + "-token blocks holds nothing");
  }
  if (layout_.dtype == "f16" || layout_.dtype == "bf16") {
    elem_ = layout_.dtype == "f16" ? KvElement::f16 : KvElement::bf16;
    elem_bytes_ = 2;
  } else if (layout_.dtype == "f32") {
    elem_ = KvElement::f32;
    elem_bytes_ = 4;
  } else if (dtype_ != KvHostDtype::same) {
    throw std::invalid_argument(std::string("KV host tier: --hicache-dtype ") + kv_host_dtype_name(dtype_) +
                                " cannot encode a " + layout_.dtype + " KV pool; use same");
  }
  if (dtype_ == KvHostDtype::f16 && elem_ == KvElement::bf16) {
    throw std::invalid_argument("KV host tier: --hicache-dtype f16 saves nothing on a bf16 KV pool; use same or q8_0");
  }
  const auto half_elems = static_cast<size_t>(layout_.token_bytes / 2) / elem_bytes_;
  if (dtype_ == KvHostDtype::q8_0 && half_elems % q8_group != 0) {
    throw std::invalid_argument("KV host tier: --hicache-dtype q8_0 needs each token's K to be a multiple of 32 "
                                "elements; this model's is " + std::to_string(half_elems));
  }
  const auto elems = static_cast<size_t>(layout_.block_bytes()) / elem_bytes_;
  switch (dtype_) {
    case KvHostDtype::same: encoded_bytes_ = layout_.block_bytes(); break;
    case KvHostDtype::f16: encoded_bytes_ = static_cast<int64_t>(elems * 2); break;
    case KvHostDtype::q8_0: encoded_bytes_ = static_cast<int64_t>(elems / q8_group * q8_group_bytes); break;
  }
  if (capacity_bytes < encoded_bytes_) {
    throw std::invalid_argument("KV host tier: a capacity of " + std::to_string(capacity_bytes) +
                                " bytes is less than one block (" + std::to_string(encoded_bytes_) + " bytes)");
  }
  stats_.capacity_bytes = capacity_bytes;
  // Twice the blocks the tier holds (counting their data, not their
  // prompts): a block back within about two of the tier's turnovers.
  max_ghosts_ = static_cast<size_t>(2 * (capacity_bytes / encoded_bytes_)) + 16;
}

std::vector<uint8_t> KvHostStore::encode(std::span<const uint8_t> data) const {
  const size_t n = data.size() / elem_bytes_;
  if (dtype_ == KvHostDtype::same || (dtype_ == KvHostDtype::f16 && elem_ == KvElement::f16)) {
    return {data.begin(), data.end()};
  }
  std::vector<uint8_t> out(static_cast<size_t>(encoded_bytes_));
  if (dtype_ == KvHostDtype::f16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_f16(element(data.data() + i * elem_bytes_, elem_));
      std::memcpy(out.data() + i * 2, &h, 2);
    }
    return out;
  }
  float x[q8_group];
  for (size_t g = 0; g < n / q8_group; ++g) {
    float amax = 0.0f;
    for (size_t i = 0; i < q8_group; ++i) {
      x[i] = element(data.data() + (g * q8_group + i) * elem_bytes_, elem_);
      amax = std::max(amax, std::fabs(x[i]));
    }
    // The scale is stored as a half; quantize against the rounded value so
    // that decoding multiplies by exactly what encoding divided by.
    const uint16_t scale = f32_to_f16(amax / 127.0f);
    const float d = f16_to_f32(scale);
    uint8_t* o = out.data() + g * q8_group_bytes;
    std::memcpy(o, &scale, 2);
    for (size_t i = 0; i < q8_group; ++i) {
      const float q = d > 0.0f ? std::nearbyint(x[i] / d) : 0.0f;
      o[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
    }
  }
  return out;
}

std::vector<uint8_t> KvHostStore::decode(std::span<const uint8_t> data) const {
  if (dtype_ == KvHostDtype::same || (dtype_ == KvHostDtype::f16 && elem_ == KvElement::f16)) {
    return {data.begin(), data.end()};
  }
  std::vector<uint8_t> out(static_cast<size_t>(layout_.block_bytes()));
  const size_t n = out.size() / elem_bytes_;
  if (dtype_ == KvHostDtype::f16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, data.data() + i * 2, 2);
      put_element(out.data() + i * elem_bytes_, elem_, f16_to_f32(h));
    }
    return out;
  }
  for (size_t g = 0; g < n / q8_group; ++g) {
    const uint8_t* in = data.data() + g * q8_group_bytes;
    uint16_t scale;
    std::memcpy(&scale, in, 2);
    const float d = f16_to_f32(scale);
    for (size_t i = 0; i < q8_group; ++i) {
      put_element(out.data() + (g * q8_group + i) * elem_bytes_, elem_,
                  d * static_cast<float>(static_cast<int8_t>(in[2 + i])));
    }
  }
  return out;
}

std::optional<uint64_t> KvHostStore::held(std::span<const int32_t> prompt, int32_t block, uint64_t lineage) const {
  const auto end = (static_cast<size_t>(block) + 1) * static_cast<size_t>(layout_.block_tokens);
  if (block < 0 || end > prompt.size()) return std::nullopt;
  const uint64_t key = kv_block_key(layout_, prompt, block, lineage);
  auto it = index_.find(key);
  // Every token, lengths included, and the lineage: a colliding key is a miss.
  if (it == index_.end() || it->second.lineage != lineage ||
      !std::equal(it->second.prompt.begin(), it->second.prompt.end(), prompt.begin(),
                  prompt.begin() + static_cast<std::ptrdiff_t>(end))) {
    return std::nullopt;
  }
  return key;
}

void KvHostStore::touch(uint64_t key, Entry& e) {
  lru_.erase({e.last_use, -e.depth, key});
  e.last_use = ++clock_;
  lru_.insert({e.last_use, -e.depth, key});
}

std::optional<std::vector<uint8_t>> KvHostStore::peek(std::span<const int32_t> prompt, int32_t block,
                                                      uint64_t lineage) const {
  const auto key = held(prompt, block, lineage);
  if (!key) return std::nullopt;
  return decode(index_.at(*key).data);
}

std::optional<std::vector<uint8_t>> KvHostStore::load(std::span<const int32_t> prompt, int32_t block, uint64_t lineage) {
  const auto key = held(prompt, block, lineage);
  if (!key) return std::nullopt;
  Entry& e = index_.at(*key);
  touch(*key, e);
  e.proven = true;
  ++stats_.loaded;
  return decode(e.data);
}

void KvHostStore::let_go(std::map<uint64_t, Entry>::iterator it, std::vector<KvDemotedBlock>* demoted, bool for_room) {
  Entry& e = it->second;
  lru_.erase({e.last_use, -e.depth, it->first});
  stats_.bytes -= e.bytes;
  ++stats_.evicted;
  if (for_room && ghosts_.insert(it->first).second) {
    ghost_order_.push_back(it->first);
    while (ghost_order_.size() > max_ghosts_) {
      ghosts_.erase(ghost_order_.front());
      ghost_order_.pop_front();
    }
  }
  if (demoted) demoted->push_back({std::move(e.prompt), e.depth, decode(e.data), e.lineage});
  index_.erase(it);
  stats_.blocks = static_cast<int64_t>(index_.size());
}

bool KvHostStore::store(std::span<const int32_t> prompt, int32_t block, std::span<const uint8_t> data,
                        std::vector<KvDemotedBlock>* demoted, uint64_t lineage) {
  const auto end = (static_cast<size_t>(block) + 1) * static_cast<size_t>(layout_.block_tokens);
  if (block < 0 || end > prompt.size() || static_cast<int64_t>(data.size()) != layout_.block_bytes()) return false;
  const uint64_t key = kv_block_key(layout_, prompt, block, lineage);
  if (index_.count(key)) return false;  // here already (or a colliding prompt holds the key: keep it)
  Entry e;
  e.prompt.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(end));
  e.lineage = lineage;
  e.depth = block;
  e.data = encode(data);
  e.bytes = static_cast<int64_t>(e.data.size() + e.prompt.size() * sizeof(int32_t));
  if (e.bytes > stats_.capacity_bytes) return false;
  const bool returning = ghosts_.count(key) > 0;
  if (returning && stats_.bytes + e.bytes > stats_.capacity_bytes &&
      index_.at(std::get<2>(*lru_.begin())).proven) {
    // Back after it was let go, into a full tier whose next block out has
    // proven itself: a cycle longer than the tier. Keep what is here.
    ++stats_.refused;
    if (demoted) demoted->push_back({std::move(e.prompt), block, std::vector<uint8_t>(data.begin(), data.end()), lineage});
    return false;
  }
  while (stats_.bytes + e.bytes > stats_.capacity_bytes) {
    auto victim = index_.find(std::get<2>(*lru_.begin()));
    let_go(victim, demoted, true);
  }
  e.proven = returning;
  e.last_use = ++clock_;
  lru_.insert({e.last_use, -e.depth, key});
  stats_.bytes += e.bytes;
  index_.emplace(key, std::move(e));
  stats_.blocks = static_cast<int64_t>(index_.size());
  ++stats_.stored;
  return true;
}

int64_t KvHostStore::clear() {
  const auto n = static_cast<int64_t>(index_.size());
  while (!index_.empty()) let_go(index_.begin(), nullptr, false);
  return n;
}

std::string KvHostStore::check() const {
  int64_t bytes = 0;
  for (const auto& [key, e] : index_) {
    bytes += e.bytes;
    if (!lru_.count({e.last_use, -e.depth, key})) return "block " + std::to_string(key) + " is missing from the LRU order";
    if (e.prompt.size() != (static_cast<size_t>(e.depth) + 1) * static_cast<size_t>(layout_.block_tokens) ||
        static_cast<int64_t>(e.data.size()) != encoded_bytes_) {
      return "block " + std::to_string(key) + " has the wrong size";
    }
  }
  if (lru_.size() != index_.size()) {
    return "the LRU order lists " + std::to_string(lru_.size()) + " blocks for " + std::to_string(index_.size());
  }
  if (stats_.blocks != static_cast<int64_t>(index_.size())) {
    return std::to_string(stats_.blocks) + " blocks counted, " + std::to_string(index_.size()) + " held";
  }
  if (stats_.bytes != bytes) return std::to_string(stats_.bytes) + " bytes counted, " + std::to_string(bytes) + " held";
  // free + evictable == capacity with every held byte evictable: what is
  // left to check is that free is not negative.
  if (bytes > stats_.capacity_bytes) {
    return std::to_string(bytes) + " bytes held over the capacity of " + std::to_string(stats_.capacity_bytes);
  }
  return "";
}

}  // namespace actorlm
