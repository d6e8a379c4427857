#pragma once
// Blocks of prompt KV as the host and disk tiers of the KV cache (HiCache's
// L2 and L3) hold them: block_tokens consecutive tokens of one prompt, every
// layer, named by a key chained over the prompt.
//
// Block i's key hashes the layout and the tokens of blocks 0..i, so a key
// names the whole prefix up to the block's end, as a radix path does. Both
// tiers use the same keys, so a block can move between them and a prompt can
// be matched across them block by block.
//
// A block's data is, per layer, every token's K then every token's V, each
// token's half token_bytes / 2 bytes in the pool's element type: the layout
// of ModelRunner::read_kv for the block's rows.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actorlm {

struct KvBlockLayout {
  std::string model_digest;  // the model, shape and tokenizer the KV belongs to
  std::string dtype;         // the pool's element type ("f32", "f16")
  int32_t n_layers = 0;
  int64_t token_bytes = 0;   // K plus V of one token in one layer
  int32_t block_tokens = 64;
  int64_t block_bytes() const { return static_cast<int64_t>(n_layers) * block_tokens * token_bytes; }
  bool operator==(const KvBlockLayout&) const = default;
};

// Whose KV a prompt's blocks hold, beyond the layout: 0 for the base model,
// else the lineage of the LoRA adapter it ran with (kv_adapter_lineage).
// The same tokens under two lineages have different KV, so the lineage is
// chained in at the root: their keys never meet, in this process or the
// next (the disk tier outlives it; an adapter's id does not).
//
// The lineage of an adapter file loaded at `scale`: its model_fingerprint()
// and the scale, hashed. Never 0.
uint64_t kv_adapter_lineage(std::string_view fingerprint, float scale);

// The key of the chain's start: the layout and the lineage, so two models'
// (or adapters') blocks never share a key. Never 0 (0 means "no parent").
uint64_t kv_block_root(const KvBlockLayout& layout, uint64_t lineage = 0);
// The key of a block whose parent's key is `parent` (the root for block 0).
uint64_t kv_block_chain(uint64_t parent, std::span<const int32_t> tokens);
// The key of block `block` of `prompt`, which must hold it whole.
uint64_t kv_block_key(const KvBlockLayout& layout, std::span<const int32_t> prompt, int32_t block,
                      uint64_t lineage = 0);

// Tokens [first, first + count) of a block's data, in the same layout.
std::vector<uint8_t> kv_block_slice(std::span<const uint8_t> block, const KvBlockLayout& layout, size_t first,
                                    size_t count);

}  // namespace actorlm
