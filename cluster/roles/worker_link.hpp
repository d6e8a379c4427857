#pragma once
// A head's stand-in for the worker of a worker node (`actorlm node --role
// worker`): the local scheduler sends it ForwardBatches as it would to a local
// worker, and it passes them to the node's gateway. It is the actor that
// joins the node, so the node sees one head for as long as the link lives;
// when the link goes (the engine stops or its process dies) the node is
// free for another head.
//
//   (join_atom) -> WireMessage{NodeWelcome}, once joined; an error if not
//   (forward_atom, WireMessage{ForwardBatch}) -> WireMessage{BatchResult}
//
//   (shutdown_atom, stop_token): stops it; keep the token in this process
//
// After the node is lost every forward fails with the reason, which fails
// the scheduler's step and so the requests in it. It learns the loss from a
// functor attached to the gateway's proxy, never from a message: it drops
// exit and down messages, which a peer could forge (cluster/transport/exit_proof_actor.hpp),
// and takes forward batches from this process only.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <string>

#include "cluster/roles/cluster_config.hpp"
#include "cluster/transport/cluster_atoms.hpp"

namespace actorlm {

caf::actor spawn_worker_link(caf::actor_system& system, NodeAddress node, RemoteSecurity security, std::string head_name,
                             std::chrono::milliseconds timeout, uint64_t stop_token);

}  // namespace actorlm
