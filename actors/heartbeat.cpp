#include "actors/heartbeat.hpp"

#include <algorithm>

namespace actorlm {

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::begin(std::chrono::milliseconds interval, std::function<void()> beat) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    beat_ = std::move(beat);
    interval_ = std::max(interval, std::chrono::milliseconds(1));
    active_ = true;
    ++generation_;
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
}

void Heartbeat::end() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = false;
    ++generation_;
  }
  cv_.notify_all();
}

void Heartbeat::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!active_) {
      cv_.wait(lock, [&] { return stop_ || active_; });
      continue;
    }
    const uint64_t seen = generation_;
    // Woken early by begin(), end() or the destructor: start over.
    if (cv_.wait_for(lock, interval_, [&] { return stop_ || generation_ != seen; })) continue;
    std::function<void()> beat = beat_;
    lock.unlock();
    beat();
    lock.lock();
  }
}

}  // namespace actorlm
