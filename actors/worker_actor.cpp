#include "actors/worker_actor.hpp"

#include <caf/all.hpp>
#include <chrono>

#include "actors/forward_codec.hpp"
#include "actors/wire.hpp"

namespace actorlm {
namespace {

struct WorkerState {
  std::shared_ptr<ModelRunner> runner;
  static inline const char* name = "actorlm.worker";
};

WireMessage run_batch(ModelRunner& runner, const WireMessage& in) {
  std::string error;
  auto decoded = decode_forward(in.bytes, &error);
  if (!decoded) return {encode_result(0, {}, {}, {}, 0, "rejected forward batch: " + error)};
  auto t0 = std::chrono::steady_clock::now();
  try {
    ForwardOutput out = runner.forward(decoded->batch);
    std::vector<SampleResult> results = runner.sample(out, decoded->sampling);
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    return {encode_result(decoded->batch_id, decoded->request_ids, results, decoded->sample, us, "")};
  } catch (const std::exception& e) {
    return {encode_result(decoded->batch_id, decoded->request_ids, {}, {}, 0, e.what())};
  }
}

caf::behavior worker(caf::stateful_actor<WorkerState>* self, std::shared_ptr<ModelRunner> runner) {
  self->state.runner = std::move(runner);
  return {
      [self](forward_atom, const WireMessage& in) -> WireMessage { return run_batch(*self->state.runner, in); },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& system, std::shared_ptr<ModelRunner> runner) {
  return system.spawn<caf::detached>(worker, std::move(runner));
}

}  // namespace actorlm
