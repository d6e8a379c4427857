#pragma once
// What actually travels between actorlm actors: one sealed FlatBuffers message
// (messages/envelope.hpp) in an inspectable wrapper, so it serializes across
// nodes with CAF's middleman, plus the atoms that name each interface's
// operations (CAF 0.17 atoms: at most 10 characters). The atoms only nodes
// exchange are in cluster/transport/cluster_atoms.hpp.

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <vector>

namespace actorlm {

struct WireMessage {
  std::vector<uint8_t> bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WireMessage& x) {
  return f(caf::meta::type_name("actorlm.WireMessage"), x.bytes);
}

using forward_atom = caf::atom_constant<caf::atom("forward")>;
// A worker that can come back after it was lost (a head's link to a worker
// node: cluster/roles/worker_link.hpp) answers (worker_back_atom) once it
// serves steps again, with WireMessage{NodeWelcome}, or with an error once
// it will not. Forwards it fails meanwhile fail with
// caf::sec::no_route_to_receiving_node (ActorWorker: WorkerReset).
using worker_back_atom = caf::atom_constant<caf::atom("workerback")>;
// LoRA adapters at run time: (adapter_atom, WireMessage{AdapterChange}) ->
// WireMessage{AdapterReply}, engine to scheduler to worker, this process only.
using adapter_atom = caf::atom_constant<caf::atom("adapter")>;
// Liveness of a step (actors/actor_worker.hpp, ActorWorker): the worker
// sends (heartbeat_atom, batch id) while it computes a batch whose sender
// asked for beats; the scheduler's relay hands it a step's outcome as
// (step_done_atom, batch id, WireMessage{BatchResult}) or (step_failed_atom,
// batch id, caf::error).
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;
using step_failed_atom = caf::atom_constant<caf::atom("stepfail")>;
// Requests to the radix-cache and memory-pool managers; the message kind in
// the envelope says which operation.
using kv_atom = caf::atom_constant<caf::atom("kv")>;
// Engine traffic, every payload a FlatBuffers message: GenerateRequest (client
// to tokenizer), TokenizedRequest (tokenizer to scheduler, and to the
// detokenizer as the registration of its stop strings), TokenStream
// (scheduler to detokenizer), TextDelta (to the client), Abort (client abort,
// detokenizer stop), StatsRequest / EngineStats. flush_atom and shutdown_atom
// carry no data: lifecycle orders from the Engine that owns the actors.
using generate_atom = caf::atom_constant<caf::atom("generate")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using stream_atom = caf::atom_constant<caf::atom("stream")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
// A head's router reports how many nodes it has (status); the Engine asks.
using status_atom = caf::atom_constant<caf::atom("status")>;

// Prefill/decode disaggregation (messages/kv_transfer.fbs): a worker copies
// KV rows out or in (KvRowsRequest); a scheduler reserves rows for a
// transferred request (TokenizedRequest), starts it from its first token
// once its KV is written, gives a reservation back, or releases a held request
// (KvHandoff).
using kv_read_atom = caf::atom_constant<caf::atom("kvread")>;
using kv_write_atom = caf::atom_constant<caf::atom("kvwrite")>;
// The same, for a data plane in the worker's own process: rows and layers as
// arguments, the bytes as a plain vector.
using kv_read_raw_atom = caf::atom_constant<caf::atom("kvreadraw")>;
using kv_write_raw_atom = caf::atom_constant<caf::atom("kvwriteraw")>;
using kv_reserve_atom = caf::atom_constant<caf::atom("kvreserve")>;
using kv_activate_atom = caf::atom_constant<caf::atom("kvactivate")>;
using kv_cancel_atom = caf::atom_constant<caf::atom("kvcancel")>;
using kv_release_atom = caf::atom_constant<caf::atom("kvrelease")>;
// Live migration: a scheduler freezes a decoding request for its KV to be
// copied elsewhere (KvMove -> KvFreezeReply), or puts it back (KvMove);
// kv_release lets it go once the copy is done.
using kv_freeze_atom = caf::atom_constant<caf::atom("kvfreeze")>;
using kv_thaw_atom = caf::atom_constant<caf::atom("kvthaw")>;
// An engine to a cluster head's router: (drain_atom, node index or address,
// on) -> std::string, the node's state as JSON, or an error starting with
// "error: " (Engine::drain_node).
using drain_atom = caf::atom_constant<caf::atom("drain")>;

}  // namespace actorlm
