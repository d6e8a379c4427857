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

const char* prefetch_policy_name(HiCachePrefetchPolicy p) {
  switch (p) {
    case HiCachePrefetchPolicy::wait_complete:
      return "wait_complete";
    case HiCachePrefetchPolicy::timeout:
      return "timeout";
    case HiCachePrefetchPolicy::best_effort:
      break;
  }
  return "best_effort";
}

std::optional<HiCachePrefetchPolicy> prefetch_policy_from(std::string_view name) {
  for (auto p : {HiCachePrefetchPolicy::best_effort, HiCachePrefetchPolicy::wait_complete, HiCachePrefetchPolicy::timeout}) {
    if (name == prefetch_policy_name(p)) return p;
  }
  return std::nullopt;
}

KvTiers::KvTiers(std::shared_ptr<KvHostStore> host, std::shared_ptr<KvDiskStore> disk, HiCacheWritePolicy policy)
    : host_(std::move(host)), disk_(std::move(disk)), policy_(policy) {
  if (!host_ && !disk_) throw std::invalid_argument("KvTiers: neither a host nor a disk tier");
  if (host_ && disk_ && !(host_->layout() == disk_->layout())) {
    throw std::invalid_argument("KvTiers: the host and disk tiers hold different KV layouts");
  }
  refresh_stats();
  io_ = std::thread([this] { io_loop(); });
}

KvTiers::Turn::Turn(const KvTiers& t) : t_(t) {
  ++t_.callers_;
  lock_ = std::unique_lock<std::mutex>(t_.mu_);
  --t_.callers_;
  // The I/O thread may have stepped aside for this caller: it re-checks when
  // the lock is free again (this caller may wait on a condition inside, as
  // drain() does, rather than leave).
  t_.step_aside_.notify_all();
}

KvTiers::Turn::~Turn() {
  if (lock_.owns_lock()) lock_.unlock();
  t_.step_aside_.notify_all();
}

void KvTiers::refresh_stats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  if (host_) host_figures_ = host_->stats();
  if (disk_) disk_figures_ = disk_->stats();
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
  std::lock_guard<std::mutex> lock(stats_mu_);
  return host_figures_;
}

std::optional<KvDiskStats> KvTiers::disk_stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return disk_figures_;
}

void KvTiers::drain() const {
  Turn turn(*this);
  idle_.wait(turn.lock(), [&] { return jobs_.empty(); });
}

size_t KvTiers::pending_blocks() const {
  Turn turn(*this);
  return pending_blocks_;
}

void KvTiers::pause_io(bool paused) {
  {
    Turn turn(*this);
    paused_ = paused;
  }
  wake_.notify_all();
}

size_t KvTiers::prefetched_blocks() const {
  Turn turn(*this);
  return staged_.size();
}

// As load_from_tiers: the last prompt token is always computed, so a
// prefetch covers the whole blocks before it.
static std::span<const int32_t> prefetch_key(std::span<const int32_t> prompt, size_t block_tokens) {
  if (prompt.size() < 2) return {};
  return prompt.first((prompt.size() - 1) / block_tokens * block_tokens);
}

void KvTiers::prefetch(std::span<const int32_t> prompt, int32_t from_block, uint64_t lineage) {
  const auto b = static_cast<size_t>(block_tokens());
  const std::span<const int32_t> key = prefetch_key(prompt, b);
  Job job{JobKind::prefetch, true, std::vector<int32_t>(key.begin(), key.end()), lineage, {}, {}, {}, false};
  for (auto k = static_cast<size_t>(std::max(0, from_block)); k < key.size() / b; ++k) job.blocks.push_back(static_cast<int32_t>(k));
  queue(std::move(job));
}

bool KvTiers::prefetching(std::span<const int32_t> prompt, uint64_t lineage) const {
  const std::span<const int32_t> key = prefetch_key(prompt, static_cast<size_t>(block_tokens()));
  Turn turn(*this);
  return std::any_of(jobs_.begin(), jobs_.end(), [&](const Job& j) {
    return j.kind == JobKind::prefetch && !j.dropped && j.lineage == lineage &&
           std::equal(j.prompt.begin(), j.prompt.end(), key.begin(), key.end());
  });
}

void KvTiers::drop_prefetch(std::span<const int32_t> prompt, uint64_t lineage) {
  const auto b = static_cast<size_t>(block_tokens());
  const std::span<const int32_t> key = prefetch_key(prompt, b);
  Turn turn(*this);
  // Marked, not erased: the I/O thread may be inside the job (between two
  // of its blocks, with the lock given up).
  for (Job& j : jobs_) {
    if (j.kind == JobKind::prefetch && j.lineage == lineage && std::equal(j.prompt.begin(), j.prompt.end(), key.begin(), key.end())) {
      j.dropped = true;
    }
  }
  if (staged_.empty()) return;
  for (size_t end = b; end <= key.size(); end += b) {
    auto it = staged_.find({lineage, std::vector<int32_t>(key.begin(), key.begin() + static_cast<long>(end))});
    if (it == staged_.end()) continue;
    staged_bytes_ -= static_cast<int64_t>(it->second.data.size());
    std::erase(staged_order_, it->first);
    staged_.erase(it);
  }
}

void KvTiers::wait_prefetch(std::chrono::milliseconds at_most) const {
  Turn turn(*this);
  if (std::none_of(jobs_.begin(), jobs_.end(), [](const Job& j) { return j.kind == JobKind::prefetch && !j.dropped; })) return;
  prefetched_.wait_for(turn.lock(), at_most);
}

std::set<std::thread::id> KvTiers::read_threads() const {
  Turn turn(*this);
  return read_threads_;
}

std::set<std::thread::id> KvTiers::store_threads() const {
  Turn turn(*this);
  return store_threads_;
}

void KvTiers::queue(Job job) {
  if (job.blocks.empty()) return;
  {
    Turn turn(*this);
    if (job.kind != JobKind::prefetch) pending_blocks_ += job.blocks.size();
    jobs_.push_back(std::move(job));
  }
  wake_.notify_all();
}

void KvTiers::io_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || (!paused_ && !jobs_.empty()); });
    if (jobs_.empty()) return;  // stopping, and nothing left to store
    // The job stays queued, with its data, until every block is done, so a
    // load finds each block in the queue or in its tier. Between blocks the
    // lock goes to any caller waiting for it. (A reference into a deque
    // survives the push_backs callers make meanwhile.)
    Job& job = jobs_.front();
    for (size_t i = 0; i < job.blocks.size(); ++i) {
      step_aside_.wait(lock, [&] { return callers_.load() == 0; });
      const bool more = run_block(job, i);
      refresh_stats();
      if (!more) break;
    }
    const bool prefetch = job.kind == JobKind::prefetch;
    if (!prefetch) {
      pending_blocks_ -= job.blocks.size();
      store_threads_.insert(std::this_thread::get_id());
    }
    jobs_.pop_front();
    if (prefetch) prefetched_.notify_all();
    if (jobs_.empty()) idle_.notify_all();
  }
}

const KvTiers::Job* KvTiers::queued(std::span<const int32_t> prompt, int32_t block, uint64_t lineage, size_t* at) const {
  const size_t end = static_cast<size_t>(block + 1) * static_cast<size_t>(block_tokens());
  if (prompt.size() < end) return nullptr;
  for (auto job = jobs_.rbegin(); job != jobs_.rend(); ++job) {
    if (job->kind == JobKind::prefetch || job->lineage != lineage || job->prompt.size() < end || !std::equal(prompt.begin(), prompt.begin() + static_cast<long>(end), job->prompt.begin())) {
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

std::optional<KvTiers::Loaded> KvTiers::load(std::span<const int32_t> prompt, int32_t block, uint64_t lineage) {
  Turn turn(*this);
  size_t at = 0;
  if (const Job* job = queued(prompt, block, lineage, &at)) {
    const bool host = job->kind == JobKind::write_back ? host_ != nullptr : job->to[at].first;
    return Loaded{job->data[at], host ? KvTier::host : KvTier::disk};
  }
  const auto b = static_cast<size_t>(block_tokens());
  if (!staged_.empty() && prompt.size() >= static_cast<size_t>(block + 1) * b) {
    auto it = staged_.find({lineage, std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<long>(static_cast<size_t>(block + 1) * b))});
    if (it != staged_.end()) {
      // Taken: the pool holds it from now on.
      Loaded out{std::move(it->second.data), it->second.tier};
      staged_bytes_ -= static_cast<int64_t>(out.data.size());
      std::erase(staged_order_, it->first);
      staged_.erase(it);
      return out;
    }
  }
  std::optional<Loaded> out;
  if (host_) {
    if (auto d = host_->load(prompt, block, lineage)) out = Loaded{std::move(*d), KvTier::host};
  }
  if (!out && disk_) {
    // Not there, or refused and counted by the disk tier: nullopt.
    if (auto d = disk_->load(prompt, block, nullptr, lineage)) out = Loaded{std::move(*d), KvTier::disk};
  }
  if (out) read_threads_.insert(std::this_thread::get_id());
  refresh_stats();
  return out;
}

std::vector<std::vector<uint8_t>> KvTiers::read_blocks(Worker& worker, std::span<const int32_t> rows,
                                                       std::span<const int32_t> blocks) const {
  const auto b = static_cast<size_t>(block_tokens());
  std::vector<std::vector<uint8_t>> out;
  out.reserve(blocks.size());
  for (int32_t k : blocks) out.push_back(worker.read_kv(rows.subspan(static_cast<size_t>(k) * b, b), 0, layout().n_layers));
  return out;
}

void KvTiers::after_prefill(Worker& worker, std::span<const int32_t> prompt, std::span<const int32_t> rows,
                            uint64_t lineage) {
  const auto b = static_cast<size_t>(block_tokens());
  const auto blocks = static_cast<int32_t>(std::min(prompt.size(), rows.size()) / b);
  if (blocks == 0) return;
  prompt = prompt.first(static_cast<size_t>(blocks) * b);
  Job job{JobKind::write_through, true, std::vector<int32_t>(prompt.begin(), prompt.end()), lineage, {}, {}, {}, false};
  {
    Turn turn(*this);
    // The disk takes a block only after its parent: from the first block it
    // cannot serve, skipping those it still holds (stranded behind a damaged
    // one, reachable again once that is rewritten).
    const int32_t disk_from = disk_ ? disk_->match(prompt, lineage) / block_tokens() : blocks;
    size_t at = 0;
    for (int32_t k = 0; k < blocks; ++k) {
      if (queued(prompt, k, lineage, &at)) continue;  // on its way already
      const bool to_host = host_ && !host_->contains(prompt, k, lineage);
      const bool to_disk = disk_ && k >= disk_from && !disk_->contains(prompt, k, lineage);
      if (!to_host && !to_disk) continue;
      job.blocks.push_back(k);
      job.to.emplace_back(to_host, to_disk);
    }
  }
  job.data = read_blocks(worker, rows, job.blocks);
  queue(std::move(job));
}

void KvTiers::after_eviction(Worker& worker, std::span<const RadixCache::EvictedPath> paths,
                             std::span<const uint64_t> lineages) {
  const auto b = static_cast<size_t>(block_tokens());
  for (size_t i = 0; i < paths.size(); ++i) {
    const RadixCache::EvictedPath& p = paths[i];
    const uint64_t lineage = i < lineages.size() ? lineages[i] : 0;
    const auto end = static_cast<int32_t>(p.tokens.size() / b);
    std::span<const int32_t> prompt = std::span(p.tokens).first(static_cast<size_t>(end) * b);
    Job job{JobKind::write_back, true, std::vector<int32_t>(prompt.begin(), prompt.end()), lineage, {}, {}, {}, false};
    {
      Turn turn(*this);
      size_t at = 0;
      if (host_) {
        // The blocks that end inside the evicted node; the first may begin
        // in its parent, whose rows are still intact.
        for (auto k = static_cast<int32_t>(static_cast<size_t>(p.start) / b); k < end; ++k) {
          if (!host_->contains(prompt, k, lineage) && !queued(prompt, k, lineage, &at)) job.blocks.push_back(k);
        }
      } else {
        // Straight to disk, which takes a block only after its parent: the
        // parents' blocks too (children are evicted first).
        for (int32_t k = disk_->match(prompt, lineage) / block_tokens(); k < end; ++k) {
          if (!disk_->contains(prompt, k, lineage) && !queued(prompt, k, lineage, &at)) job.blocks.push_back(k);
        }
      }
    }
    job.data = read_blocks(worker, p.rows, job.blocks);
    queue(std::move(job));
  }
}

bool KvTiers::run_block(Job& job, size_t i) {
  const std::span<const int32_t> prompt(job.prompt);
  const uint64_t lineage = job.lineage;
  const int32_t k = job.blocks[i];
  switch (job.kind) {
    case JobKind::write_through:
      if (job.to[i].first) host_->store(prompt, k, job.data[i], nullptr, lineage);
      if (job.to[i].second && job.disk_ok && !disk_->contains(prompt, k, lineage)) {
        job.disk_ok = disk_->store(prompt, k, job.data[i], lineage);
      }
      return true;
    case JobKind::write_back:
      if (host_) {
        std::vector<KvDemotedBlock> down;
        host_->store(prompt, k, job.data[i], disk_ ? &down : nullptr, lineage);
        demote(std::move(down));
        return true;
      }
      return disk_->contains(prompt, k, lineage) || disk_->store(prompt, k, job.data[i], lineage);
    case JobKind::prefetch: {
      if (job.dropped) return false;
      const auto b = static_cast<size_t>(block_tokens());
      const std::span<const int32_t> through = prompt.first(static_cast<size_t>(k + 1) * b);
      StagedKey key{lineage, std::vector<int32_t>(through.begin(), through.end())};
      size_t at = 0;
      if (staged_.count(key) || queued(prompt, k, lineage, &at)) return true;
      // As load(): the host tier first. A load stops where no tier has the
      // block, and so does this.
      Staged s{{}, KvTier::host};
      if (host_) {
        if (auto d = host_->load(prompt, k, lineage)) s.data = std::move(*d);
      }
      if (s.data.empty()) {
        if (!disk_ || !disk_->contains(prompt, k, lineage)) return false;
        auto d = disk_->load(prompt, k, nullptr, lineage);
        if (!d) return false;  // damaged: refused and counted by the disk tier
        s = Staged{std::move(*d), KvTier::disk};
      }
      read_threads_.insert(std::this_thread::get_id());
      staged_bytes_ += static_cast<int64_t>(s.data.size());
      staged_.emplace(key, std::move(s));
      staged_order_.push_back(std::move(key));
      while (staged_bytes_ > prefetch_capacity && !staged_order_.empty()) {
        auto it = staged_.find(staged_order_.front());
        if (it != staged_.end()) {
          staged_bytes_ -= static_cast<int64_t>(it->second.data.size());
          staged_.erase(it);
        }
        staged_order_.pop_front();
      }
      return true;
    }
  }
  return false;
}

void KvTiers::demote(std::vector<KvDemotedBlock> blocks) {
  if (!disk_ || blocks.empty()) return;
  const auto b = static_cast<size_t>(block_tokens());
  std::sort(blocks.begin(), blocks.end(),
            [](const KvDemotedBlock& x, const KvDemotedBlock& y) { return x.prompt.size() < y.prompt.size(); });
  auto from_batch = [&](std::span<const int32_t> prefix, uint64_t lineage) -> const std::vector<uint8_t>* {
    for (const auto& x : blocks) {
      if (x.lineage == lineage && std::equal(x.prompt.begin(), x.prompt.end(), prefix.begin(), prefix.end())) return &x.data;
    }
    return nullptr;
  };
  for (const auto& d : blocks) {
    if (disk_->contains(d.prompt, d.block, d.lineage)) continue;
    bool chained = true;
    for (int32_t k = disk_->match(d.prompt, d.lineage) / block_tokens(); chained && k < d.block; ++k) {
      if (disk_->contains(d.prompt, k, d.lineage)) continue;
      std::optional<std::vector<uint8_t>> parent = host_->peek(d.prompt, k, d.lineage);
      const std::vector<uint8_t>* bytes =
          parent ? &*parent : from_batch(std::span(d.prompt).first(static_cast<size_t>(k + 1) * b), d.lineage);
      chained = bytes && disk_->store(d.prompt, k, *bytes, d.lineage);
    }
    if (chained) disk_->store(d.prompt, d.block, d.data, d.lineage);
  }
}

std::string KvTiers::check() const {
  Turn turn(*this);
  idle_.wait(turn.lock(), [&] { return jobs_.empty(); });
  if (host_) {
    if (std::string bad = host_->check(); !bad.empty()) return "KV host tier: " + bad;
  }
  if (disk_) {
    if (std::string bad = disk_->check(); !bad.empty()) return "KV disk tier: " + bad;
  }
  return "";
}

}  // namespace actorlm
