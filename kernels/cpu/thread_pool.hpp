#pragma once
// A fixed set of worker threads for data-parallel loops in the CPU backend.
// parallel_for blocks until every index ran. Not reentrant: one loop at a time
// (the backend runs one op at a time).
//
// Decode issues a few hundred short loops per token (a one-row matvec is
// 10-200 us), so two things matter more than in a batch-sized loop:
//   - Chunks are claimed, not assigned: every thread, the caller included,
//     takes the next piece of what is left, large pieces first and single
//     indices last. A worker the OS has not scheduled yet (the machine is
//     shared) delays nothing: the caller runs what is left.
//   - Between loops a worker spins for ~100 us before it sleeps on a
//     condition variable, so back-to-back loops do not pay a futex wake-up.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace actorlm::cpu {

class ThreadPool {
 public:
  // n_threads counts the caller: n_threads - 1 workers are started.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(begin, end) over contiguous chunks that cover [0, n) exactly once,
  // on any of the threads (fn may be called several times per thread). fn
  // must not throw.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker();
  void run_chunks();
  // Waits until state_ differs from `seen` (spinning, then sleeping) and
  // returns the new value; false when the pool is stopping.
  bool wait_for_change(uint64_t seen, uint64_t& state);

  // state_ = generation * 2 + open: a worker may join the current loop only
  // while state_ still holds the value it read after raising active_ (see
  // worker()), so the caller, having closed the loop and seen active_ == 0,
  // knows no thread still touches fn.
  std::atomic<uint64_t> state_{0};
  std::atomic<int> active_{0};       // workers inside the current loop
  std::atomic<int64_t> next_{0};  // the first index not yet claimed
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;

  uint64_t generation_ = 0;  // the caller's count of loops
  std::mutex mutex_;         // for wake_cv_ only
  std::condition_variable wake_cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace actorlm::cpu
