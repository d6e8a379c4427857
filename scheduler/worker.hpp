#pragma once
// The scheduler's view of the worker: one forward pass plus sampling per
// call (one ForwardBatch message and its BatchResult in the actor system).
// LocalWorker runs a ModelRunner in-process.

#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/model_runner.hpp"

namespace actorlm {

class Worker {
 public:
  virtual ~Worker() = default;
  // One SampleResult per request of the batch, in order.
  virtual std::vector<SampleResult> run(const ForwardBatch& batch, std::span<const SampleRequest> sampling) = 0;
};

class LocalWorker final : public Worker {
 public:
  explicit LocalWorker(ModelRunner& runner) : runner_(runner) {}
  std::vector<SampleResult> run(const ForwardBatch& batch, std::span<const SampleRequest> sampling) override {
    return runner_.sample(runner_.forward(batch), sampling);
  }

 private:
  ModelRunner& runner_;
};

}  // namespace actorlm
