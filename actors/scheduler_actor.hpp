#pragma once
// The scheduler actor: a detached blocking actor that runs Scheduler over the
// radix and pool managers and the worker, and sends each step's tokens as a
// TokenStream to `sink` (the detokenizer, or a node's gateway). It takes
// (generate_atom, WireMessage{TokenizedRequest}, client), abort_atom and
// stop_atom (WireMessage{Abort}), stats_atom (StatsRequest -> EngineStats),
// flush_atom (-> freed rows) and shutdown_atom.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "scheduler/scheduler.hpp"

namespace actorlm {

caf::actor spawn_scheduler(caf::actor_system& system, SchedulerConfig config, caf::actor pool, caf::actor radix,
                           caf::actor worker, caf::actor sink);

}  // namespace actorlm
