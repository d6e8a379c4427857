#include "model/kv_layer_clock.hpp"

#include <algorithm>

namespace actorlm {

void KvLayerClock::begin(uint64_t step) {
  std::lock_guard lock(mu_);
  current_ = std::max(current_, step);
  layers_ = 0;
}

void KvLayerClock::stored(int32_t layers) {
  bool notify = false;
  {
    std::lock_guard lock(mu_);
    layers_ = std::max(layers_, layers);
    ++reported_;
    notify = waiters_ > 0;
  }
  if (notify) cv_.notify_all();
}

void KvLayerClock::end(uint64_t step) {
  {
    std::lock_guard lock(mu_);
    ended_ = std::max(ended_, step);
  }
  cv_.notify_all();
}

bool KvLayerClock::ready(uint64_t step, int32_t layers) const {
  return step <= ended_ || (step == current_ && layers <= layers_);
}

bool KvLayerClock::wait(uint64_t step, int32_t layers, std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  ++waiters_;
  const bool ok = cv_.wait_for(lock, wait, [&] { return ready(step, layers); });
  --waiters_;
  return ok;
}

int64_t KvLayerClock::layers_reported() const {
  std::lock_guard lock(mu_);
  return reported_;
}

}  // namespace actorlm
