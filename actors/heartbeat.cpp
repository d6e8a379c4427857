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
  interval = std::max(interval, std::chrono::milliseconds(1));
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    beat_ = std::move(beat);
    active_ = true;
    since_ = std::chrono::steady_clock::now();
    wake = interval != interval_;  // the thread must take up the new period
    interval_ = interval;
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  if (wake) cv_.notify_all();
}

void Heartbeat::end() {
  // No wake-up: the thread sees it at its next tick. begin() and end() run
  // once per step on the worker's thread, and waking another thread twice
  // a step would cost a context switch on cores busy with the model.
  std::lock_guard<std::mutex> lock(mu_);
  active_ = false;
}

void Heartbeat::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // Ticks at half the interval: a beat at most 1.5 intervals after the
    // last one (or the start of the work).
    cv_.wait_for(lock, interval_ / 2 + std::chrono::microseconds(500));
    if (stop_) break;
    const auto now = std::chrono::steady_clock::now();
    if (!active_ || now - since_ < interval_) continue;
    since_ = now;
    std::function<void()> beat = beat_;
    lock.unlock();
    beat();
    lock.lock();
  }
}

}  // namespace actorlm
