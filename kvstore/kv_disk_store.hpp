#pragma once
// The disk tier of the hierarchical KV cache (the seeds' L3, SGLang's
// HiCache storage): prompt KV kept in files on local disk, so a prefix
// outlives the pool it was computed in, and the process (a warm restart).
//
// A prompt is cut into blocks of `block_tokens` tokens, keyed as
// kvstore/kv_block.hpp says; the block's own tokens are kept too, so a hash
// collision is caught, never served.
//
// One file per block, <dir>/<key as 16 hex digits>.kvb:
//   offset  size  field
//   0       4     magic "AKVB"
//   4       4     format version (1), little-endian
//   8       4     header bytes (what follows up to the data), little-endian
//   12      ...   header: key, parent key (for a prompt's first block: the
//                 lineage of its KV, kvstore/kv_block.hpp, 0 for the base
//                 model), layout (model digest, dtype,
//                 n_layers, token_bytes, block_tokens), the block's tokens,
//                 data bytes, data CRC-32, and a CRC-32 of the header itself
//   ...     n     data: per layer, every token's K, then every token's V (the
//                 layout of ModelRunner::read_kv)
// A file is written under a temporary name and renamed, so a crash leaves no
// half-written block under a real name. Nothing read from disk is trusted:
// a file with a bad header, another layout (another model, dtype or block
// size), tokens that differ from the key's, a short body or a CRC mismatch is
// a miss, is counted, and (unless it belongs to another layout, which may be
// another server's) is deleted.
//
// Capacity is in bytes; the least recently used blocks go first (deeper
// blocks before their parents on a tie, since a block is useless without its
// parents). One owner: not thread-safe, and not shared between processes.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvstore/kv_block.hpp"

namespace actorlm {

struct KvDiskStats {
  int64_t blocks = 0, bytes = 0, capacity_bytes = 0;
  int64_t stored = 0;         // blocks written
  int64_t loaded = 0;         // blocks read back and verified
  int64_t evicted = 0;        // blocks deleted for room
  int64_t rejected = 0;       // files refused: damaged, truncated, colliding
  int64_t foreign = 0;        // files of another layout, left alone
  int64_t write_errors = 0;   // blocks that could not be written (disk full...)
};

class KvDiskStore {
 public:
  // Opens (creating it if needed) `dir` and indexes the blocks already there
  // by reading their headers. Throws std::runtime_error when the folder
  // cannot be created or read, std::invalid_argument for a bad layout or a
  // capacity below one block.
  KvDiskStore(std::string dir, KvBlockLayout layout, int64_t capacity_bytes);

  const KvBlockLayout& layout() const { return layout_; }
  const KvDiskStats& stats() const { return stats_; }

  // Every call names a prompt's blocks with the lineage of their KV
  // (kvstore/kv_block.hpp: 0 for the base model); blocks of two lineages
  // are two blocks, whatever their tokens.

  // How many leading tokens of `prompt` (a multiple of block_tokens) have all
  // their blocks here. Looks at the index only; marks those blocks used.
  int32_t match(std::span<const int32_t> prompt, uint64_t lineage = 0);

  // Block `block` of `prompt` (its tokens must be in the prompt), read and
  // verified: block_bytes() of data. nullopt (and the file gone, and
  // rejected counted) when it is missing or fails a check; *error says why.
  std::optional<std::vector<uint8_t>> load(std::span<const int32_t> prompt, int32_t block, std::string* error,
                                           uint64_t lineage = 0);

  // Writes block `block` of `prompt` with `data` (block_bytes()); false when
  // it is there already, when its parent block is not (a block is only
  // reachable through its parents), or when writing failed (counted).
  // Evicts least recently used blocks to stay within capacity.
  bool store(std::span<const int32_t> prompt, int32_t block, std::span<const uint8_t> data, uint64_t lineage = 0);

  // The tier's own invariant, for the engine's self-check: the counted
  // blocks and bytes are the index's, and within capacity. Empty when it
  // holds, else what is wrong.
  std::string check() const;

  // Whether block `block` of `prompt` is indexed (not whether it is sound).
  bool contains(std::span<const int32_t> prompt, int32_t block, uint64_t lineage = 0) const {
    return index_.count(key(prompt, block, lineage)) > 0;
  }

  // The key of block `block` of `prompt` (kv_block_key).
  uint64_t key(std::span<const int32_t> prompt, int32_t block, uint64_t lineage = 0) const {
    return kv_block_key(layout_, prompt, block, lineage);
  }

 private:
  struct Entry {
    uint64_t parent = 0;              // block 0: its lineage
    int32_t depth = 0;                // block index within its prompt
    std::vector<int32_t> tokens;      // the block's own
    int64_t bytes = 0;                // file size
    uint64_t last_use = 0;
  };
  std::string path_of(uint64_t key) const;
  void forget(uint64_t key, bool remove_file);
  void make_room(int64_t bytes);
  void index_file(const std::string& path);

  std::string dir_;
  KvBlockLayout layout_;
  std::map<uint64_t, Entry> index_;
  uint64_t clock_ = 0;
  KvDiskStats stats_;
};

}  // namespace actorlm
