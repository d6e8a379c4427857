#pragma once
// An engine node's KV sender: a prefill node's held requests go to their
// decode nodes (prefill/decode disaggregation), a request frozen for a live
// migration to the node it moves to (first_token -1: it goes on from its
// output there). The node's gateway hands it each held request (KvSendOrder: the decode node's
// address, the ticket that node issued, the prompt's KV rows and the first
// token); the sender joins the decode node as a head joins a node (same
// secret, TLS and sealed session), reads the rows from its own worker one
// chunk at a time (cluster/transfer/kv_transfer.hpp plans them), sends them with at
// most `window` chunks unanswered, and then commits the first token. Only
// the chunks in flight are in memory, so a slow decode node slows the
// transfer instead of growing the sender. When the decode node has a data
// port, the chunks go there instead (a thread per transfer), and only the
// commit goes over the middleman.
//
// (kv_send_atom, WireMessage KvSendOrder) -> std::string: empty once the
// decode node has every chunk and has started the request, else why not (the
// gateway then aborts the held request). Over the data plane the answer
// comes only once the transfer's thread has stopped reading the rows, which
// it may read in place. (kv_send_stop_atom, ticket) cuts that transfer
// short. A streamed order (KvSendOrder::streaming: the prompt still
// computing) starts the transfer with the rows computed so far, and
// (kv_send_more_atom, WireMessage KvSendOrder) under its ticket brings the
// next ones, the last with the first token; over the data plane they go as
// they come. Orders come from this process only; (shutdown_atom, stop_token)
// stops it.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <string>

#include "cluster/transfer/kv_data_plane.hpp"
#include "cluster/transfer/kv_transfer.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "cluster/transport/remote_security.hpp"

namespace actorlm {

struct KvSenderConfig {
  KvLayout layout;          // this node's pool
  NodeModel model;          // a decode node must serve the same
  RemoteSecurity security;  // as the node's own
  caf::actor worker;        // reads the rows (kv_read_atom)
  KvRowSpans spans;         // or, on the data plane, the pool's rows in place
  // The worker's layer clock (ModelRunner::set_kv_clock): a streamed
  // prompt's chunk goes as soon as its step has stored its layers.
  std::shared_ptr<KvLayerClock> clock;
  std::string name;         // how decode nodes' logs name this node
  int64_t chunk_bytes = 4 << 20;
  int window = 4;           // chunks read or sent and not yet answered, per transfer
  std::chrono::milliseconds timeout{30000};  // per join step, read, chunk and commit
  // Tests only: flip one byte of the n-th chunk this sender sends (counted
  // from 0), as a damaged link or buffer would; -1 never. `actorlm node`
  // takes it from ACTORLM_TEST_CORRUPT_KV_CHUNK.
  int64_t corrupt_chunk = -1;
  // Tests only: on the data plane, wait this long after each chunk sent, so
  // a test can kill either node in the middle of a transfer. `actorlm node`
  // takes it from ACTORLM_TEST_ONLY_KV_SEND_PAUSE_MS.
  std::chrono::milliseconds pause_per_chunk{0};
  // Send the bytes over a decode node's data port when it has one and the
  // join has a session key (cluster/transfer/kv_data_plane.hpp); else, or
  // when false, as chunk messages over the middleman.
  bool data_plane = true;
  DataProtection data_protection = DataProtection::sealed;
  // The data plane's link to ask for: UCX where both nodes run it and it
  // reaches the decode node, else the socket (kv_data_plane.hpp).
  DataTransport data_transport = DataTransport::socket;
  // A streamed prompt's rows go over the data plane while its later chunks
  // compute; false: once all of it is computed (as over the middleman).
  bool stream = true;
  // Keep data plane connections for the next transfer to the same node
  // (KvDataLinks); false: one per transfer (benchmarks' A/B; `actorlm node`
  // takes it from ACTORLM_TEST_ONLY_KV_FRESH_CONNECTIONS).
  bool keep_connections = true;
};

caf::actor spawn_kv_sender(caf::actor_system& system, KvSenderConfig config, uint64_t stop_token);

}  // namespace actorlm
