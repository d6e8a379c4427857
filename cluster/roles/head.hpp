#pragma once
// A cluster head: an Engine whose scheduler is remote in part. Either a
// router over engine nodes (cluster.nodes: each node runs a whole engine
// core; requests are routed cache-aware) or the scheduler and managers here
// over one worker node (cluster.remote_worker: every step's ForwardBatch
// crosses the network). A head loads only the model's config and tokenizer;
// its actor system must have been set up with configure_remote()
// (cluster/transport/remote_setup.hpp).

#include <caf/actor_system.hpp>
#include <memory>

#include "actors/engine.hpp"
#include "cluster/roles/cluster_config.hpp"

namespace actorlm {

// A head when `cluster` names nodes or a remote worker, else a local Engine.
// A head over nodes waits up to connect_timeout_s for all of them and throws
// std::runtime_error when none joined; a remote-worker head throws when its
// worker cannot be joined or runs another model. Bad settings (no
// middleman, TLS without OpenSSL, an address security refuses) throw
// std::invalid_argument.
std::unique_ptr<Engine> make_engine(caf::actor_system& system, const EngineConfig& config,
                                    const ClusterConfig& cluster);

}  // namespace actorlm
