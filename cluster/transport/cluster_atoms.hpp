#pragma once
// The atoms that name what nodes of a cluster say to each other (CAF 0.17
// atoms: at most 10 characters). A handler tells atoms apart by value, so none
// may repeat one of actors/wire.hpp.

#include <caf/atom.hpp>

namespace actorlm {

// A head joins a node (hello, then join: NodeHello / NodeJoin), an engine
// hands a node's gateway its scheduler (attach), a head's router dials a node
// (dial).
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using attach_atom = caf::atom_constant<caf::atom("attach")>;
using dial_atom = caf::atom_constant<caf::atom("dial")>;
// A node's gateway, from a functor attached to a joined head's proxy in its
// own process: that head's connection is gone.
using head_gone_atom = caf::atom_constant<caf::atom("headgone")>;
// A head's router or worker link, from a functor attached to a joined node's
// gateway proxy in its own process: that node's connection is gone.
using node_gone_atom = caf::atom_constant<caf::atom("nodegone")>;
// Between nodes (cluster/transfer/kv_sender.hpp): a prefill node's gateway orders its
// KV sender to move a held request (KvSendOrder); the sender sends a decode
// node's gateway the chunks (KvChunk) and then the commit (KvHandoff).
using kv_send_atom = caf::atom_constant<caf::atom("kvsend")>;
using kv_chunk_atom = caf::atom_constant<caf::atom("kvchunk")>;
using kv_commit_atom = caf::atom_constant<caf::atom("kvcommit")>;
// A decode node's data port (cluster/transfer/kv_data_plane.hpp) tells its
// gateway, in this process, that a request's transfer failed there.
using kv_data_failed_atom = caf::atom_constant<caf::atom("kvdatafail")>;
// A prefill node's KV sender, from the thread that ran a transfer over the
// data plane in this process: that transfer's outcome.
using kv_data_done_atom = caf::atom_constant<caf::atom("kvdatadone")>;
// A decode node's data port tells its gateway, in this process, that the
// last write in flight of a dropped transfer has landed (KvReceiver::landed):
// its request's deferred abort may go to the scheduler now.
using kv_landed_atom = caf::atom_constant<caf::atom("kvlanded")>;
// A prefill node's gateway tells its KV sender, in this process, to stop the
// transfer under a ticket (its request is being aborted); the transfer's
// answer comes once nothing reads its rows any more.
using kv_send_stop_atom = caf::atom_constant<caf::atom("kvsendstop")>;
// A prefill node's gateway to its KV sender, in this process: the next rows
// of a streamed transfer (KvSendOrder with the same ticket), the last with
// the first token. No answer: the first order's answers for the whole transfer.
using kv_send_more_atom = caf::atom_constant<caf::atom("kvsendmore")>;
// Live migration, a head to a node's gateway (sealed KvMove): send this
// frozen request's KV to the node and ticket named (kv_freeze and kv_thaw,
// actors/wire.hpp, freeze it first and put it back).
using kv_move_atom = caf::atom_constant<caf::atom("kvmove")>;
// A node's gateway to every head it has joined: this node is leaving (its
// operator asked it to drain): move its requests elsewhere and route nothing
// more to it. Taken only from the gateway of a node the head dialled.
using leaving_atom = caf::atom_constant<caf::atom("leaving")>;
// A node's gateway to every other head joined to it, after a head changed
// its LoRA adapters: (adapter_news_atom, WireMessage{AdapterNews}). Taken
// only from the gateway of a node the head joined.
using adapter_news_atom = caf::atom_constant<caf::atom("adnews")>;

}  // namespace actorlm
