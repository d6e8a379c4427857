#pragma once
// A cluster head's router: stands where a local engine has its scheduler.
// The tokenizer hands it TokenizedRequests; it picks a worker node with the
// cache-aware PrefixRouter, sends the request to that node's gateway, and
// passes the node's TokenStreams on to the head's detokenizer. Aborts, stops,
// stats (summed, plus one NodeStats per node) and flushes go to the nodes.
//
// It dials every node itself (through the middleman, TLS when configured),
// joins it with the shared secret, checks that it serves the head's model,
// and monitors it. A node that is lost (connection closed, heartbeats
// missed) ends its in-flight requests with an error at once, leaves the
// rotation, and is dialled again every retry interval until it is back.
//
// (status_atom) -> (int32_t joined, int32_t total, std::string last errors):
// how the engine waits for its nodes at start-up.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <string>

#include "actors/cluster_config.hpp"
#include "actors/cluster_handshake.hpp"

namespace actorlm {

caf::actor spawn_router(caf::actor_system& system, ClusterConfig config, NodeModel model, caf::actor detokenizer,
                        std::string head_name);

}  // namespace actorlm
