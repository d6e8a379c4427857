#pragma once
// How far the current forward pass has stored its KV, layer by layer, for a
// reader on another thread (a prefill node's KV transfer, which sends each
// layer of a prompt chunk while the next layers compute).
//
// The scheduler numbers its steps (ForwardBatch::step, increasing); the
// worker's pass for step s calls begin(s), stored(l + 1) once layer l's K and
// V are in the pool, and end(s) when the pass returns or throws. A reader
// that was told "these rows are written by step s" waits for the layers it
// needs. What a step stored stays readable after it (the scheduler keeps a
// streamed prompt's rows until its transfer ends).
//
// stored() is called from inside the layer loop, so it is cheap: a lock and
// a notify only when someone waits.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace actorlm {

class KvLayerClock {
 public:
  void begin(uint64_t step);
  // `layers` layers of the current step are stored.
  void stored(int32_t layers);
  // Step `step` is over (every layer it writes is stored, or it failed and
  // its readers' requests fail with it); so is every step before it.
  void end(uint64_t step);
  // Until `layers` layers of `step` are stored or `step` is over; false
  // when `wait` passed first.
  bool wait(uint64_t step, int32_t layers, std::chrono::milliseconds wait);

  // Layers reported by stored() since the clock was made (tests, metrics).
  int64_t layers_reported() const;

 private:
  bool ready(uint64_t step, int32_t layers) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t current_ = 0;  // the step in progress, or the last one begun
  int32_t layers_ = 0;    // of current_
  uint64_t ended_ = 0;    // every step up to this one is over
  int32_t waiters_ = 0;
  int64_t reported_ = 0;
};

}  // namespace actorlm
