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

KvTiers::KvTiers(std::shared_ptr<KvHostStore> host, std::shared_ptr<KvDiskStore> disk, HiCacheWritePolicy policy)
    : host_(std::move(host)), disk_(std::move(disk)), policy_(policy) {
  if (!host_ && !disk_) throw std::invalid_argument("KvTiers: neither a host nor a disk tier");
  if (host_ && disk_ && !(host_->layout() == disk_->layout())) {
    throw std::invalid_argument("KvTiers: the host and disk tiers hold different KV layouts");
  }
  io_ = std::thread([this] { io_loop(); });
}

KvTiers::~KvTiers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    paused_ = false;
  }
  wake_.notify_all();
  io_.join();
}

const KvBlockLayout& KvTiers::layout() const { return host_ ? host_->layout() : disk_->layout(); }

std::optional<KvHostStats> KvTiers::host_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!host_) return std::nullopt;
  return host_->stats();
}

std::optional<KvDiskStats> KvTiers::disk_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!disk_) return std::nullopt;
  return disk_->stats();
}

void KvTiers::drain() const {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return jobs_.empty(); });
}

size_t KvTiers::pending_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_blocks_;
}

void KvTiers::pause_io(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
  }
  wake_.notify_all();
}

std::set<std::thread::id> KvTiers::store_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_threads_;
}

void KvTiers::queue(Job job) {
  if (job.blocks.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_blocks_ += job.blocks.size();
    jobs_.push_back(std::move(job));
  }
  wake_.notify_all();
}

void KvTiers::io_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || (!paused_ && !jobs_.empty()); });
    if (jobs_.empty()) return;  // stopping, and nothing left to store
    // Stays queued (so loads still find it) until its stores are done; the
    // lock is held throughout, so no load sees it half stored.
    run(jobs_.front());
    pending_blocks_ -= jobs_.front().blocks.size();
    jobs_.pop_front();
    store_threads_.insert(std::this_thread::get_id());
    if (jobs_.empty()) idle_.notify_all();
  }
}

const KvTiers::Job* KvTiers::queued(std::span<const int32_t> prompt, int32_t block, size_t* at) const {
  const size_t end = static_cast<size_t>(block + 1) * static_cast<size_t>(block_tokens());
  if (prompt.size() < end) return nullptr;
  for (auto job = jobs_.rbegin(); job != jobs_.rend(); ++job) {
    if (job->prompt.size() < end || !std::equal(prompt.begin(), prompt.begin() + static_cast<long>(end), job->prompt.begin())) {
      continue;
    }
    for (size_t i = 0; i < job->blocks.size(); ++i) {
      if (job->blocks[i] == block) {
        *at = i;
        return &*job;
      }
    }
  }
  return nullptr;
}

std::optional<KvTiers::Loaded> KvTiers::load(std::span<const int32_t> prompt, int32_t block) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t at = 0;
  if (const Job* job = queued(prompt, block, &at)) {
    const bool host = job->kind == HiCacheWritePolicy::write_back ? host_ != nullptr : job->to[at].first;
    return Loaded{job->data[at], host ? KvTier::host : KvTier::disk};
  }
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
  std::vector<std::vector<uint8_t>> out;
  out.reserve(blocks.size());
  for (int32_t k : blocks) out.push_back(worker.read_kv(rows.subspan(static_cast<size_t>(k) * b, b), 0, layout().n_layers));
  return out;
}

void KvTiers::after_prefill(Worker& worker, std::span<const int32_t> prompt, std::span<const int32_t> rows) {
  const auto b = static_cast<size_t>(block_tokens());
  const auto blocks = static_cast<int32_t>(std::min(prompt.size(), rows.size()) / b);
  if (blocks == 0) return;
  prompt = prompt.first(static_cast<size_t>(blocks) * b);
  Job job{HiCacheWritePolicy::write_through, std::vector<int32_t>(prompt.begin(), prompt.end()), {}, {}, {}};
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The disk takes a block only after its parent: from the first block it
    // cannot serve, skipping those it still holds (stranded behind a damaged
    // one, reachable again once that is rewritten).
    const int32_t disk_from = disk_ ? disk_->match(prompt) / block_tokens() : blocks;
    size_t at = 0;
    for (int32_t k = 0; k < blocks; ++k) {
      if (queued(prompt, k, &at)) continue;  // on its way already
      const bool to_host = host_ && !host_->contains(prompt, k);
      const bool to_disk = disk_ && k >= disk_from && !disk_->contains(prompt, k);
      if (!to_host && !to_disk) continue;
      job.blocks.push_back(k);
      job.to.emplace_back(to_host, to_disk);
    }
  }
  job.data = read_blocks(worker, rows, job.blocks);
  queue(std::move(job));
}

void KvTiers::after_eviction(Worker& worker, std::span<const RadixCache::EvictedPath> paths) {
  const auto b = static_cast<size_t>(block_tokens());
  for (const auto& p : paths) {
    const auto end = static_cast<int32_t>(p.tokens.size() / b);
    std::span<const int32_t> prompt = std::span(p.tokens).first(static_cast<size_t>(end) * b);
    Job job{HiCacheWritePolicy::write_back, std::vector<int32_t>(prompt.begin(), prompt.end()), {}, {}, {}};
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t at = 0;
      if (host_) {
        // The blocks that end inside the evicted node; the first may begin
        // in its parent, whose rows are still intact.
        for (auto k = static_cast<int32_t>(static_cast<size_t>(p.start) / b); k < end; ++k) {
          if (!host_->contains(prompt, k) && !queued(prompt, k, &at)) job.blocks.push_back(k);
        }
      } else {
        // Straight to disk, which takes a block only after its parent: the
        // parents' blocks too (children are evicted first).
        for (int32_t k = disk_->match(prompt) / block_tokens(); k < end; ++k) {
          if (!disk_->contains(prompt, k) && !queued(prompt, k, &at)) job.blocks.push_back(k);
        }
      }
    }
    job.data = read_blocks(worker, p.rows, job.blocks);
    queue(std::move(job));
  }
}

void KvTiers::run(const Job& job) {
  const std::span<const int32_t> prompt(job.prompt);
  if (job.kind == HiCacheWritePolicy::write_through) {
    bool disk_ok = true;
    for (size_t i = 0; i < job.blocks.size(); ++i) {
      const int32_t k = job.blocks[i];
      if (job.to[i].first) host_->store(prompt, k, job.data[i]);
      // A failed write: its children cannot follow.
      if (job.to[i].second && disk_ok && !disk_->contains(prompt, k)) disk_ok = disk_->store(prompt, k, job.data[i]);
    }
    return;
  }
  std::vector<KvDemotedBlock> down;
  for (size_t i = 0; i < job.blocks.size(); ++i) {
    if (host_) {
      host_->store(prompt, job.blocks[i], job.data[i], disk_ ? &down : nullptr);
    } else if (!disk_->contains(prompt, job.blocks[i]) && !disk_->store(prompt, job.blocks[i], job.data[i])) {
      break;
    }
  }
  demote(std::move(down));
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
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return jobs_.empty(); });
  if (host_) {
    if (std::string bad = host_->check(); !bad.empty()) return "KV host tier: " + bad;
  }
  if (disk_) {
    if (std::string bad = disk_->check(); !bad.empty()) return "KV disk tier: " + bad;
  }
  return "";
}

}  // namespace actorlm
