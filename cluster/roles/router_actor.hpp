#pragma once
// A cluster head's router: stands where a local engine has its scheduler.
// The tokenizer hands it TokenizedRequests; it picks a worker node with the
// cache-aware PrefixRouter, sends the request to that node's gateway, and
// passes the node's TokenStreams on to the head's detokenizer. Aborts, stops,
// stats (summed, plus one NodeStats per node) and flushes go to the nodes.
//
// It dials every node itself (through the middleman, TLS when configured),
// joins it with the shared secret, checks that it serves the head's model,
// and watches its connection (a functor attached to the gateway's proxy; no
// monitor, and exit and down messages are dropped, since a node could forge
// them, cluster/transport/exit_proof_actor.hpp). A node that is lost (connection closed, heartbeats
// missed) ends its in-flight requests with an error at once, leaves the
// rotation, and is dialled again every retry interval until it is back.
//
// (status_atom) -> (int32_t joined, int32_t total, std::string last errors):
// how the engine waits for its nodes at start-up.
// (shutdown_atom, stop_token) stops it; keep the token in this process.
// Every order but a node's token stream must come from this process.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cluster/roles/cluster_config.hpp"
#include "cluster/transport/cluster_handshake.hpp"

namespace actorlm {

// The LoRA adapters a head serves (name, id), as its router last set them:
// the head's engine reads them for every request that names one, without
// a message to the router (which relays every token).
class ServedAdapters {
 public:
  using List = std::vector<std::pair<std::string, int32_t>>;
  List get() const {
    std::lock_guard lock(mu_);
    return list_;
  }
  void set(List list) {
    std::lock_guard lock(mu_);
    list_ = std::move(list);
  }

 private:
  mutable std::mutex mu_;
  List list_;
};

// `served`, when given, follows the router's adapter set.
caf::actor spawn_router(caf::actor_system& system, ClusterConfig config, NodeModel model, caf::actor detokenizer,
                        std::string head_name, uint64_t stop_token, std::shared_ptr<ServedAdapters> served = nullptr);

}  // namespace actorlm
