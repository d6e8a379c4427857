#pragma once
// The worker: owns a ModelRunner (weights, KV buffers, req_to_token) and
// answers (forward_atom, WireMessage{ForwardBatch}) with a WireMessage
// holding a BatchResult. A malformed or inconsistent batch gets a BatchResult
// whose error says why; the runner's state is untouched. Spawn it detached:
// a forward pass blocks for the length of the computation.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "model/model_runner.hpp"

namespace actorlm {

caf::actor spawn_worker(caf::actor_system& system, std::shared_ptr<ModelRunner> runner);

}  // namespace actorlm
