#pragma once
// The scheduler's view of the worker: one forward pass plus sampling per
// call (one ForwardBatch message and its BatchResult in the actor system).
// LocalWorker runs a ModelRunner in-process.

#include <span>
#include <stdexcept>
#include <vector>

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/model_runner.hpp"

namespace actorlm {

// Thrown by Worker::run when the worker is gone for good (its actor ended,
// or it fell silent past the liveness deadline), as opposed to a step that
// failed: no later step can run either.
class WorkerLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown by Worker::run when the worker was lost and is back (a head's
// worker node restarted or reconnected): steps can run again, but every KV
// row it held is gone. The scheduler then computes each request again from
// its tokens (Scheduler::forget_kv).
class WorkerReset : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Worker {
 public:
  virtual ~Worker() = default;
  // One SampleResult per request of the batch, in order.
  virtual std::vector<SampleResult> run(const ForwardBatch& batch, std::span<const SampleRequest> sampling) = 0;
  // Copies KV rows out of or into the pool, layers [first_layer,
  // last_layer), in ModelRunner::read_kv's layout (the disk tier of the KV
  // cache uses them). A worker that cannot throws std::logic_error.
  virtual std::vector<uint8_t> read_kv(std::span<const int32_t>, int32_t, int32_t) {
    throw std::logic_error("this worker cannot copy KV rows");
  }
  virtual void write_kv(std::span<const int32_t>, int32_t, int32_t, std::span<const uint8_t>) {
    throw std::logic_error("this worker cannot copy KV rows");
  }
};

class LocalWorker final : public Worker {
 public:
  explicit LocalWorker(ModelRunner& runner) : runner_(runner) {}
  std::vector<SampleResult> run(const ForwardBatch& batch, std::span<const SampleRequest> sampling) override {
    return runner_.step(batch, {sampling.begin(), sampling.end()});
  }
  std::vector<uint8_t> read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer) override {
    return runner_.read_kv(rows, first_layer, last_layer);
  }
  void write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                std::span<const uint8_t> data) override {
    runner_.write_kv(rows, first_layer, last_layer, data);
  }

 private:
  ModelRunner& runner_;
};

}  // namespace actorlm
