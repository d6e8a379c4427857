#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace actorlm::cpu {
namespace {

constexpr auto spin_time = std::chrono::microseconds(100);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  for (int i = 1; i < std::max(1, n_threads); ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  { std::lock_guard<std::mutex> lock(mutex_); }
  wake_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

// Loop states (state_): job g is open at 2g + 1 and closed at 2g + 2, so no
// value repeats and 0 (nothing yet) is closed. Order of the caller's steps:
//   publish job_, job_n_, next_ -> state_ = open -> run chunks
//   -> state_ = closed -> wait for active_ == 0.
// A worker raises active_ and only then re-reads state_: if it still reads
// the open value, the caller's later close cannot miss its active_ (both
// sequentially consistent), so fn outlives every call into it.
void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  ++generation_;
  job_ = &fn;
  job_n_ = n;
  next_.store(0);
  state_.store(2 * generation_ + 1);
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_cv_.notify_all();
  }
  run_chunks();
  state_.store(2 * generation_ + 2);
  for (int spins = 0; active_.load() != 0; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a preempted worker may need this core
    }
  }
  job_ = nullptr;
}

void ThreadPool::run_chunks() {
  // Each claim takes 1 / (2 * threads) of what is left: large chunks first
  // (few claims), single indices at the end, so the threads finish within
  // about one index of each other. With fixed chunks of n / (4 * threads)
  // the pool's idle samples were 8.5% of a two-thread, 8-sequence decode
  // step; 5.5% with these.
  const int64_t parts = 2 * int64_t(size());
  int64_t begin = next_.load(std::memory_order_relaxed);
  for (;;) {
    if (begin >= job_n_) return;
    const int64_t take = std::max<int64_t>(1, (job_n_ - begin) / parts);
    if (next_.compare_exchange_weak(begin, begin + take, std::memory_order_relaxed)) {
      (*job_)(begin, begin + take);
      begin = next_.load(std::memory_order_relaxed);
    }
  }
}

bool ThreadPool::wait_for_change(uint64_t seen, uint64_t& state) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (stop_.load()) return false;
    state = state_.load();
    if (state != seen) return true;
    cpu_relax();
    if (i % 256 == 0 && std::chrono::steady_clock::now() - start > spin_time) break;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  sleepers_.fetch_add(1);
  wake_cv_.wait(lock, [&] {
    state = state_.load();
    return state != seen || stop_.load();
  });
  sleepers_.fetch_sub(1);
  return !stop_.load();
}

void ThreadPool::worker() {
  uint64_t seen = 0, state = 0;
  while (wait_for_change(seen, state)) {
    seen = state;
    if (state % 2 == 0) continue;  // closed before this worker got to it
    active_.fetch_add(1);
    if (state_.load() == state) run_chunks();
    active_.fetch_sub(1);
  }
}

}  // namespace actorlm::cpu
