#pragma once
// The scheduler actor: a detached blocking actor that runs Scheduler over the
// radix and pool managers and the worker, and sends each step's tokens as a
// TokenStream to `sink` (the detokenizer, or a node's gateway). It takes
// (generate_atom, WireMessage{TokenizedRequest}, client), abort_atom and
// stop_atom (WireMessage{Abort}), stats_atom (StatsRequest -> EngineStats),
// flush_atom (-> freed rows) and shutdown_atom.
//
// It waits for each step as long as the worker lives (`liveness`, see
// actors/actor_worker.hpp); a worker lost for good fails every request with
// ErrorKind::unavailable from then on. After every step it publishes its
// figures to `board` (may be null), which readers use instead of asking it:
// it answers stats_atom only between steps.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "actors/actor_worker.hpp"
#include "scheduler/scheduler.hpp"
#include "scheduler/stats_board.hpp"

namespace actorlm {

caf::actor spawn_scheduler(caf::actor_system& system, SchedulerConfig config, caf::actor pool, caf::actor radix,
                           caf::actor worker, caf::actor sink, WorkerLiveness liveness,
                           std::shared_ptr<StatsBoard> board = nullptr);

}  // namespace actorlm
