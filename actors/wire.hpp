#pragma once
// What actually travels between actorlm actors: one sealed FlatBuffers message
// (messages/envelope.hpp) in an inspectable wrapper, so it serializes across
// nodes with CAF's middleman, plus the atoms that name each interface's
// operations (CAF 0.17 atoms: at most 10 characters).

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
// Requests to the radix-cache and memory-pool managers; the message kind in
// the envelope says which operation.
using kv_atom = caf::atom_constant<caf::atom("kv")>;
// Engine traffic: a client's GenerateRequest (to the tokenizer), its
// TokenizedRequest (to the scheduler), TokenStream batches (to the
// detokenizer), TextDelta (to the client), and control.
using generate_atom = caf::atom_constant<caf::atom("generate")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using stream_atom = caf::atom_constant<caf::atom("stream")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;

}  // namespace actorlm
