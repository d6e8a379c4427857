#include "scheduler/kv_tiers.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace actorlm {

const char* write_policy_name(HiCacheWritePolicy p) {
  return p == HiCacheWritePolicy::write_back ? "write_back" : "write_through";
}

std::optional<HiCacheWritePolicy> write_policy_from(std::string_view name) {
  for (auto p : {HiCacheWritePolicy::write_through, HiCacheWritePolicy::write_back}) {
    if (name == write_policy_name(p)) return p;
  }
  return std::nullopt;
}

KvTiers::KvTiers(std::shared_ptr<KvHostStore> host, std::shared_ptr<KvDiskStore> disk, HiCacheWritePolicy policy,
                 int64_t max_read_bytes)
    : host_(std::move(host)), disk_(std::move(disk)), policy_(policy), max_read_bytes_(max_read_bytes) {
  if (!host_ && !disk_) throw std::invalid_argument("KvTiers: neither a host nor a disk tier");
  if (host_ && disk_ && !(host_->layout() == disk_->layout())) {
    throw std::invalid_argument("KvTiers: the host and disk tiers hold different KV layouts");
  }
}

const KvBlockLayout& KvTiers::layout() const { return host_ ? host_->layout() : disk_->layout(); }

std::optional<KvTiers::Loaded> KvTiers::load(std::span<const int32_t> prompt, int32_t block) {
  if (host_) {
    if (auto d = host_->load(prompt, block)) return Loaded{std::move(*d), KvTier::host};
  }
  if (!disk_) return std::nullopt;
  auto d = disk_->load(prompt, block, nullptr);
  if (!d) return std::nullopt;  // not there, or refused and counted by the disk tier
  return Loaded{std::move(*d), KvTier::disk};
}

std::vector<std::vector<uint8_t>> KvTiers::read_blocks(Worker& worker, std::span<const int32_t> rows,
                                                       std::span<const int32_t> blocks) const {
  const auto b = static_cast<size_t>(block_tokens());
  const size_t per_call = std::max<size_t>(1, static_cast<size_t>(max_read_bytes_ / layout().block_bytes()));
  std::vector<std::vector<uint8_t>> out;
  for (size_t at = 0; at < blocks.size(); at += per_call) {
    const auto group = blocks.subspan(at, std::min(per_call, blocks.size() - at));
    std::vector<int32_t> wanted;
    for (int32_t k : group) {
      auto r = rows.subspan(static_cast<size_t>(k) * b, b);
      wanted.insert(wanted.end(), r.begin(), r.end());
    }
    const std::vector<uint8_t> all = worker.read_kv(wanted, 0, layout().n_layers);
    // The answer is laid out as one block of all the rows: cut it per block.
    KvBlockLayout whole = layout();
    whole.block_tokens = static_cast<int32_t>(wanted.size());
    for (size_t i = 0; i < group.size(); ++i) out.push_back(kv_block_slice(all, whole, i * b, b));
  }
  return out;
}

void KvTiers::after_prefill(Worker& worker, std::span<const int32_t> prompt, std::span<const int32_t> rows) {
  const auto b = static_cast<size_t>(block_tokens());
  const auto blocks = static_cast<int32_t>(std::min(prompt.size(), rows.size()) / b);
  if (blocks == 0) return;
  prompt = prompt.first(static_cast<size_t>(blocks) * b);
  // The disk takes a block only after its parent: from the first block it
  // cannot serve, skipping those it still holds (stranded behind a damaged
  // one, reachable again once that is rewritten).
  const int32_t disk_from = disk_ ? disk_->match(prompt) / block_tokens() : blocks;
  std::vector<int32_t> wanted;
  std::vector<std::pair<bool, bool>> to;  // per wanted block: (host tier, disk tier)
  for (int32_t k = 0; k < blocks; ++k) {
    const bool to_host = host_ && !host_->contains(prompt, k);
    const bool to_disk = disk_ && k >= disk_from && !disk_->contains(prompt, k);
    if (!to_host && !to_disk) continue;
    wanted.push_back(k);
    to.emplace_back(to_host, to_disk);
  }
  const auto data = read_blocks(worker, rows, wanted);
  bool disk_ok = true;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (to[i].first) host_->store(prompt, wanted[i], data[i]);
    if (to[i].second && disk_ok) disk_ok = disk_->store(prompt, wanted[i], data[i]);  // a failed write: its children cannot follow
  }
}

void KvTiers::after_eviction(Worker& worker, std::span<const RadixCache::EvictedPath> paths) {
  const auto b = static_cast<size_t>(block_tokens());
  for (const auto& p : paths) {
    const auto end = static_cast<int32_t>(p.tokens.size() / b);
    std::span<const int32_t> prompt = std::span(p.tokens).first(static_cast<size_t>(end) * b);
    std::vector<int32_t> wanted;
    if (host_) {
      // The blocks that end inside the evicted node; the first may begin in
      // its parent, whose rows are still intact.
      for (auto k = static_cast<int32_t>(static_cast<size_t>(p.start) / b); k < end; ++k) {
        if (!host_->contains(prompt, k)) wanted.push_back(k);
      }
    } else {
      // Straight to disk, which takes a block only after its parent: the
      // parents' blocks too (children are evicted first).
      for (int32_t k = disk_->match(prompt) / block_tokens(); k < end; ++k) {
        if (!disk_->contains(prompt, k)) wanted.push_back(k);
      }
    }
    const auto data = read_blocks(worker, p.rows, wanted);
    std::vector<KvDemotedBlock> down;
    for (size_t i = 0; i < wanted.size(); ++i) {
      if (host_) {
        host_->store(prompt, wanted[i], data[i], disk_ ? &down : nullptr);
      } else if (!disk_->store(prompt, wanted[i], data[i])) {
        break;
      }
    }
    demote(std::move(down));
  }
}

void KvTiers::demote(std::vector<KvDemotedBlock> blocks) {
  if (!disk_ || blocks.empty()) return;
  const auto b = static_cast<size_t>(block_tokens());
  std::sort(blocks.begin(), blocks.end(),
            [](const KvDemotedBlock& x, const KvDemotedBlock& y) { return x.prompt.size() < y.prompt.size(); });
  auto from_batch = [&](std::span<const int32_t> prefix) -> const std::vector<uint8_t>* {
    for (const auto& x : blocks) {
      if (std::equal(x.prompt.begin(), x.prompt.end(), prefix.begin(), prefix.end())) return &x.data;
    }
    return nullptr;
  };
  for (const auto& d : blocks) {
    if (disk_->contains(d.prompt, d.block)) continue;
    bool chained = true;
    for (int32_t k = disk_->match(d.prompt) / block_tokens(); chained && k < d.block; ++k) {
      if (disk_->contains(d.prompt, k)) continue;
      std::optional<std::vector<uint8_t>> parent = host_->peek(d.prompt, k);
      const std::vector<uint8_t>* bytes = parent ? &*parent : from_batch(std::span(d.prompt).first(static_cast<size_t>(k + 1) * b));
      chained = bytes && disk_->store(d.prompt, k, *bytes);
    }
    if (chained) disk_->store(d.prompt, d.block, d.data);
  }
}

std::string KvTiers::check() const {
  if (host_) {
    if (std::string bad = host_->check(); !bad.empty()) return "KV host tier: " + bad;
  }
  if (disk_) {
    if (std::string bad = disk_->check(); !bad.empty()) return "KV disk tier: " + bad;
  }
  return "";
}

}  // namespace actorlm
