#pragma once
// The worker: owns a ModelRunner (weights, KV buffers, req_to_token) and
// answers (forward_atom, WireMessage{ForwardBatch}) with a WireMessage
// holding a BatchResult. A malformed or inconsistent batch gets a BatchResult
// whose error says why; the runner's state is untouched. Spawn it detached:
// a forward pass blocks for the length of the computation.
//
// (forward_atom, uint64_t id, WireMessage, caf::actor reply_to, int32_t
// interval_ms), sent without a request, is the same forward as the
// scheduler's ActorWorker drives it: while it computes, the worker sends
// (heartbeat_atom, id) to reply_to every interval_ms from a thread of its own
// (actors/heartbeat.hpp), the evidence that a long step is still being
// computed; then (step_done_atom, id, WireMessage{BatchResult}). A worker
// that dies first sends nothing: the scheduler monitors it.
//
// Test only: ACTORLM_TEST_ONLY_WORKER_FAULT=hang@N or exit@N in the
// environment at spawn makes the worker's N-th forward (1-based) go silent
// for an hour (no heartbeats, no answer) or end the actor without an answer,
// so that process tests can show a dead worker failing requests promptly
// (every worker actor of the process does it at its N-th forward, so a
// restarted one ends too, until the restarts run out); crash@N ends only
// the process's first worker actor, at its N-th forward, as a crash would,
// so that a restarted worker shows requests going on; throw@N makes that forward fail (an exception, as a backend's), and
// poison@T every forward whose new tokens hold token id T, so that they can
// show a failed step costing no request and a poison request failing alone.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "model/model_runner.hpp"

namespace actorlm {

caf::actor spawn_worker(caf::actor_system& system, std::shared_ptr<ModelRunner> runner);

}  // namespace actorlm
