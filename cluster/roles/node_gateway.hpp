#pragma once
// A worker node's front door: the one actor a node publishes. Heads join it
// (hello / join, cluster/transport/cluster_handshake.hpp) and then send it tokenized
// requests, aborts, stops, stats and flushes, which it passes to the node's
// scheduler. It is also the scheduler's token sink: each step's TokenStream
// is split by head and sent back to the router that asked.
//
// Several heads may share a node, so the gateway gives every request its own
// node-local id and keeps the (head, head's id) pair to answer with. When a
// head's connection goes (process exit, lost connection, missed heartbeats)
// its requests are aborted and their KV freed; the gateway learns it from a
// functor attached to the head's proxy in this process, never from a message
// a peer could send (it drops every exit and down message).
// Everything that arrives is checked: the sender must have joined, the
// request must be sealed with that join's session (cluster/transport/request_session.hpp),
// the buffer must verify, token ids must be in the vocabulary; what fails is
// logged and dropped (or answered with an error for that request).

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>
#include <string>

#include "cluster/transfer/kv_data_plane.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "model/adapter_dir.hpp"

namespace actorlm {

// Prefill/decode disaggregation: on a prefill node a request sealed with
// hold_after_prefill stops after its first token, and its KV goes to the
// decode node the head named (cluster/transfer/kv_sender.hpp) before the head hears
// that the prefill side is done (a held item). On a decode node a head
// reserves rows (kv_reserve -> KvReserveReply with a ticket), and a prefill
// node, joined like a head, sends chunks (kv_chunk -> std::string error)
// and a commit (kv_commit -> std::string error) naming that ticket
// (cluster/transfer/kv_receiver.hpp); the commit starts the request, whose tokens go
// to the head that reserved it.
//
// `secret` empty: any head may join (TLS client certificates are then the
// check). The engine that owns the gateway sends it, from this process,
// (attach_atom, target, kv_worker, kv_sender, WireMessage{NodeWelcome},
// label): the scheduler (or a worker node's worker) to feed, the worker that
// copies KV rows, a prefill node's KV sender (else null), what the node
// serves, and its name in logs; heads are refused until then. It stops on (shutdown_atom, stop_token) only: keep the token
// in this process. A decode node with a data port passes `decode`: the
// gateway opens transfers in that receiver and registers each joined head's
// session key there, so the port takes chunks under it.
//
// LoRA adapters: a joined head may load one on an engine node that runs
// whole requests (adapter_atom, sealed AdapterChange -> AdapterReply) from
// a file in `lora_dir` only (none: refused), within `max_lora_bytes` over
// all the node's adapters, or drop one (cluster/roles/node_adapters.hpp).
// The attach message's last element gives the bytes of each adapter its
// welcome lists.
caf::actor spawn_node_gateway(caf::actor_system& system, std::string secret, uint64_t stop_token,
                              std::shared_ptr<KvDecodeShared> decode = nullptr, AdapterDir lora_dir = {},
                              int64_t max_lora_bytes = 0);

}  // namespace actorlm
