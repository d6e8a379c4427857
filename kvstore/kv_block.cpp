#include "kvstore/kv_block.hpp"

#include <cstring>

namespace actorlm {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64's finalizer over the running hash and the next value.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t kv_adapter_lineage(std::string_view fingerprint, float scale) {
  uint64_t h = 0x6c6f7261ull;
  for (unsigned char c : fingerprint) h = mix(h, c);
  uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  h = mix(h, bits);
  return h == 0 ? 1 : h;
}

uint64_t kv_block_root(const KvBlockLayout& l, uint64_t lineage) {
  uint64_t h = 0x6163746f726c6dull;
  for (unsigned char c : l.model_digest + "|" + l.dtype) h = mix(h, c);
  h = mix(mix(mix(h, static_cast<uint64_t>(l.n_layers)), static_cast<uint64_t>(l.token_bytes)),
          static_cast<uint64_t>(l.block_tokens));
  // The base model's root is what it was before lineages: its files on disk
  // stay valid.
  if (lineage != 0) h = mix(h, lineage);
  return h == 0 ? 1 : h;
}

uint64_t kv_block_chain(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent, tokens.size());
  for (int32_t t : tokens) h = mix(h, static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;
}

uint64_t kv_block_key(const KvBlockLayout& layout, std::span<const int32_t> prompt, int32_t block, uint64_t lineage) {
  const auto b = static_cast<size_t>(layout.block_tokens);
  uint64_t k = kv_block_root(layout, lineage);
  for (int32_t i = 0; i <= block; ++i) k = kv_block_chain(k, prompt.subspan(static_cast<size_t>(i) * b, b));
  return k;
}

std::vector<uint8_t> kv_block_slice(std::span<const uint8_t> block, const KvBlockLayout& l, size_t first,
                                    size_t count) {
  const auto b = static_cast<size_t>(l.block_tokens);
  const auto half = static_cast<size_t>(l.token_bytes / 2);
  if (first == 0 && count == b) return {block.begin(), block.end()};
  std::vector<uint8_t> out;
  out.reserve(static_cast<size_t>(l.n_layers) * count * 2 * half);
  for (size_t layer = 0; layer < static_cast<size_t>(l.n_layers); ++layer) {
    const uint8_t* base = block.data() + layer * b * 2 * half;
    for (const uint8_t* part : {base, base + b * half}) {
      out.insert(out.end(), part + first * half, part + (first + count) * half);
    }
  }
  return out;
}

}  // namespace actorlm
