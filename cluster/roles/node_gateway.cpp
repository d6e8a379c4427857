#include "cluster/roles/node_gateway.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <cstdio>
#include <map>
#include <set>

#include "actors/stream_messages.hpp"
#include "actors/wire.hpp"
#include "cluster/roles/node_adapters.hpp"
#include "cluster/transfer/kv_receiver.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "actors/local_sender.hpp"
#include "cluster/transport/request_session.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

// Unanswered hellos kept at once: a peer that keeps saying hello without
// joining cannot grow the gateway's memory.
constexpr size_t max_pending_challenges = 256;

struct Head {
  caf::actor router;
  std::string name;
  size_t requests = 0;
  RequestSession session;  // opens this head's sealed requests
  uint64_t data_session = 0;  // its key's id at the data port (decode nodes with a secret)
  // Names this head in the message its proxy's attached functor sends when
  // the connection goes. Random and never sent anywhere, so no peer can
  // claim a head went away.
  uint64_t gone_token = 0;
};

struct Route {
  caf::actor_addr head;
  uint64_t head_id = 0;
};

// Where a held request's KV goes: a prefill node's request (its address
// and ticket known from the start), or a running one frozen for a live
// migration (known once the head has a reservation: kv_move).
struct Handoff {
  std::string address;
  uint64_t ticket = 0;
  int32_t skip = 0;  // leading rows the receiving node has already
  bool sending = false;  // its transfer is under way: the sender may be reading its rows
  // A prefill node's request streams its prompt's KV (stream_held_kv): its
  // transfer opened with the first rows computed (`streaming`), and the
  // scheduler reported rows (`progressed`), so it keeps them until the
  // gateway aborts or releases it, whatever ends it.
  bool streaming = false;
  bool progressed = false;
  int32_t prompt_tokens = 0;
  int32_t reported = 0;            // prompt rows the scheduler reported so far
  std::vector<int32_t> sent_rows;  // of those, the ones past `skip`, ordered sent
  bool migrating = false;      // frozen by kv_freeze
  std::vector<int32_t> rows;   // migrating: its rows (prompt ++ output but the last token)
  int32_t cached_tokens = 0;   // migrating: its usage's, for the target to report
};

struct GatewayState {
  std::string secret, label;
  caf::actor scheduler;          // an engine node's; requests go here
  caf::actor worker;             // a worker node's; one head drives it with forward batches
  // Prefill/decode disaggregation (NodeWelcome::disaggregation_mode).
  std::string mode;
  caf::actor kv_worker;               // an engine node's worker: KV rows in and out
  caf::actor kv_sender;               // moves held requests' KV (cluster/transfer/kv_sender.hpp)
  bool stream_kv = false;             // held prompts stream their KV as it is computed (--kv-stream)
  std::shared_ptr<KvReceiver> receiver;  // open transfers into this node, by ticket
  // Decode: what this node shares with its data port (Node sets it up).
  std::shared_ptr<KvDecodeShared> decode;
  std::map<uint64_t, Handoff> handoffs;  // held requests' (PD or migration), by node-local id
  // Why the gateway aborted a request (a failed KV transfer, say): the
  // scheduler's abort carries no text, so the head hears it from here.
  std::map<uint64_t, std::string> abort_reasons;
  // Cancellations held back, by node-local id: on a decode node until the
  // request's KV writes in flight land (KvReceiver's fence), on a prefill
  // node until its transfer has stopped reading its rows (the sender's
  // answer).
  struct Fenced {
    bool stop = false;
    std::string reason;
  };
  std::map<uint64_t, Fenced> fenced;
  // Requests whose cancellation went to the scheduler: rows it reports
  // after that are being freed, so no transfer may start on them.
  std::set<uint64_t> cancelled;

  std::vector<uint8_t> welcome;  // NodeWelcome, accepted
  // An engine node's LoRA adapters as heads change them (welcome follows).
  NodeAdapters adapters;
  // Nonces handed out by hello and not yet used by a join. Keyed by the
  // nonce, not by the sender a peer claims, so no one can replace another
  // head's challenge.
  std::set<std::vector<uint8_t>> challenges;
  std::map<caf::actor_addr, Head> heads;                       // joined
  std::map<uint64_t, Route> routes;                            // by node-local id
  std::map<std::pair<caf::actor_addr, uint64_t>, uint64_t> local_ids;
  uint64_t next_id = 1;
  static inline const char* name = "actorlm.node_gateway";
};

using Self = caf::stateful_actor<GatewayState>;

caf::actor_addr sender_of(Self* self) { return caf::actor_cast<caf::actor_addr>(self->current_sender()); }

// The joined head that sent the current message, when `in` is sealed with
// that head's session key under a new sequence number: the sender CAF names
// is only a claim, the seal proves it. `payload` is then the opened message.
// Else nullptr (logged).
Head* sealed_sender(Self* self, RequestKind kind, const WireMessage& in, std::vector<uint8_t>& payload, const char* what) {
  auto it = self->state.heads.find(sender_of(self));
  if (it == self->state.heads.end()) {
    std::fprintf(stderr, "actorlm %s: dropped %s from a peer that has not joined\n", self->state.label.c_str(), what);
    return nullptr;
  }
  auto opened = it->second.session.open(kind, in.bytes);
  if (!opened) {
    std::fprintf(stderr, "actorlm %s: dropped %s not sealed by the session of head %s (forged or replayed)\n",
                 self->state.label.c_str(), what, it->second.name.c_str());
    return nullptr;
  }
  payload = std::move(*opened);
  return &it->second;
}

std::vector<uint8_t> refusal(const std::string& why) {
  fb::NodeWelcomeT w;
  w.accepted = false;
  w.error = why;
  return msg::pack(w);
}

void forget(GatewayState& s, uint64_t local_id) {
  s.handoffs.erase(local_id);
  s.cancelled.erase(local_id);
  s.abort_reasons.erase(local_id);
  // It ended: any transfer it had was committed or dropped before, so this
  // closes nothing with writes in flight.
  if (s.receiver) (void)s.receiver->drop_request(local_id);
  auto it = s.routes.find(local_id);
  if (it == s.routes.end()) return;
  auto head = s.heads.find(it->second.head);
  if (head != s.heads.end() && head->second.requests > 0) --head->second.requests;
  s.local_ids.erase({it->second.head, it->second.head_id});
  s.routes.erase(it);
}

// A node-local id for a head's request, routed back to that head.
uint64_t admit(GatewayState& s, const caf::actor_addr& from, Head& head, uint64_t head_id) {
  const uint64_t local = s.next_id++;
  s.routes[local] = Route{from, head_id};
  s.local_ids[{from, head_id}] = local;
  ++head.requests;
  return local;
}

// Aborts (or stops) local requests at the scheduler. A decode node's
// request may have KV writes in flight (admitted chunks the worker has not
// written yet): its cancellation waits until they land, since the scheduler
// frees its rows and a late write would land in another request's. A
// prefill node's held request may be on its way (the data plane reads its
// rows in place): the transfer is stopped, and the cancellation waits for
// its answer.
void cancel_at_scheduler(Self* self, bool stop, const std::vector<uint64_t>& ids, const std::string& reason) {
  auto& s = self->state;
  fb::AbortT now;
  now.reason = reason;
  for (uint64_t id : ids) {
    auto h = s.handoffs.find(id);
    if (h != s.handoffs.end() && h->second.sending) {
      if (s.fenced.emplace(id, GatewayState::Fenced{stop, reason}).second) {
        self->send(s.kv_sender, kv_send_stop_atom::value, h->second.ticket);
      }
    } else if (s.receiver && !s.receiver->drop_request(id)) {
      s.fenced.emplace(id, GatewayState::Fenced{stop, reason});
    } else {
      now.request_ids.push_back(id);
      if (s.routes.count(id)) s.cancelled.insert(id);  // forget() erases it
    }
  }
  if (now.request_ids.empty()) return;
  const WireMessage m{msg::pack(now)};
  if (stop) {
    self->send(s.scheduler, stop_atom::value, m);
  } else {
    self->send(s.scheduler, abort_atom::value, m);
  }
}

// The last write of `local`'s dropped transfer has landed.
void release_fence(Self* self, uint64_t local) {
  auto it = self->state.fenced.find(local);
  if (it == self->state.fenced.end()) return;
  const GatewayState::Fenced f = it->second;
  self->state.fenced.erase(it);
  cancel_at_scheduler(self, f.stop, {local}, f.reason);
}

void abort_local(Self* self, uint64_t local, const std::string& why) {
  if (self->state.routes.count(local)) self->state.abort_reasons.emplace(local, why);
  cancel_at_scheduler(self, false, {local}, why);
}

void on_generate(Self* self, const WireMessage& sealed) {
  auto& s = self->state;
  WireMessage in;
  Head* head = sealed_sender(self, RequestKind::generate, sealed, in.bytes, "a request");
  if (!head) return;
  if (!s.scheduler) {
    std::fprintf(stderr, "actorlm %s: dropped a request: a worker node takes forward batches only\n", s.label.c_str());
    return;
  }
  std::string error;
  auto req = msg::unpack<fb::TokenizedRequest>(in.bytes, &error);
  if (!req) {
    std::fprintf(stderr, "actorlm %s: rejected a request from %s: %s\n", s.label.c_str(), head->name.c_str(), error.c_str());
    return;
  }
  const uint64_t head_id = req->request_id;
  auto answer_error = [&](const std::string& why) {
    self->send(head->router, stream_atom::value, WireMessage{error_stream({head_id}, ErrorKind::invalid_request, why)});
  };
  // The prompt's ids and every other value are checked by the node's
  // Scheduler::refusal, which answers through the stream like any refusal.
  if (req->hold_after_prefill) {
    if (s.mode != "prefill") return answer_error("this node is not a prefill node (--disaggregation-mode prefill)");
    if (req->handoff_address.empty() || req->handoff_ticket == 0) {
      return answer_error("a held request needs the decode node's address and ticket");
    }
  }
  const caf::actor_addr from = sender_of(self);
  if (s.local_ids.count({from, head_id})) return answer_error("request id " + std::to_string(head_id) + " is already running");
  const uint64_t local = admit(s, from, *head, head_id);
  if (req->hold_after_prefill) {
    Handoff h;
    h.address = req->handoff_address;
    h.ticket = req->handoff_ticket;
    h.skip = req->handoff_skip;
    h.prompt_tokens = static_cast<int32_t>(req->input_ids.size());
    s.handoffs[local] = std::move(h);
    // With --kv-stream its rows go out layer by layer as its chunks compute
    // (the sender decides whether at once: over the data plane; or after
    // the prefill, as without it).
    req->stream_held_kv = s.kv_sender && s.stream_kv;
  }
  req->request_id = local;
  self->send(s.scheduler, generate_atom::value, WireMessage{msg::pack(*req)}, caf::actor_cast<caf::actor>(self));
}

// An Abort (or stop) from a head, with its ids made node-local.
template <class Atom>
void on_cancel(Self* self, Atom, const WireMessage& sealed) {
  auto& s = self->state;
  constexpr RequestKind kind = std::is_same_v<Atom, abort_atom> ? RequestKind::abort : RequestKind::stop;
  WireMessage in;
  if (!sealed_sender(self, kind, sealed, in.bytes, "an abort")) return;
  std::string error;
  auto a = msg::unpack<fb::Abort>(in.bytes, &error);
  if (!a) {
    std::fprintf(stderr, "actorlm %s: rejected an abort: %s\n", s.label.c_str(), error.c_str());
    return;
  }
  const caf::actor_addr from = sender_of(self);
  std::vector<uint64_t> local;
  for (uint64_t id : a->request_ids) {
    auto it = s.local_ids.find({from, id});
    if (it != s.local_ids.end()) local.push_back(it->second);
  }
  if (local.empty()) return;
  cancel_at_scheduler(self, kind == RequestKind::stop, local, a->reason);
}

// A prefill node's held request: its KV goes to the decode node the head
// named. Once that node has it all and has started the request, the prompt
// is released here (it stays in this node's radix cache) and the head gets
// the held item, which tells it the prefill side is done. A failed transfer
// aborts the request, and the head sees that abort. With stream_held_kv the
// rows come part by part (held_progress items) before the held one: the
// first opens a streamed transfer, the rest extend it.
void send_held(Self* self, uint64_t local, const fb::TokenStreamItemT& item) {
  auto& s = self->state;
  // Its cancellation is on its way to the scheduler, which frees the rows:
  // nothing may read them, and the abort's event answers the head.
  if (s.cancelled.count(local)) return;
  auto h = s.handoffs.find(local);
  const bool progress = item.held_progress;
  if (h == s.handoffs.end() || !s.kv_sender || (!progress && item.token_ids.size() != 1)) {
    return abort_local(self, local, "held request with nowhere to send its KV");
  }
  Handoff& hand = h->second;
  const int32_t skip = hand.skip;
  // The rows to send now: a report's past `skip` (the decode node has the
  // first ones), or at the end what the reports did not bring.
  std::vector<int32_t> rows;
  if (progress) {
    hand.progressed = true;
    const int32_t from = hand.reported;
    hand.reported += static_cast<int32_t>(item.held_rows.size());
    if (hand.reported > hand.prompt_tokens) return abort_local(self, local, "more prompt rows reported than the prompt has");
    const auto first = static_cast<size_t>(std::clamp(skip - from, 0, static_cast<int32_t>(item.held_rows.size())));
    rows.assign(item.held_rows.begin() + static_cast<ptrdiff_t>(first), item.held_rows.end());
    if (rows.empty()) return;  // the decode node has these already
    hand.sent_rows.insert(hand.sent_rows.end(), rows.begin(), rows.end());
  } else {
    // A streamed transfer may have every row already (the last chunk's
    // were reported as its step began); the last order then only closes it.
    const size_t sent = hand.sent_rows.size();
    const size_t left_at_least = hand.streaming ? 0 : 1;
    if (skip < 0 || static_cast<size_t>(skip) + sent + left_at_least > item.held_rows.size() ||
        item.held_rows.size() > static_cast<size_t>(hand.prompt_tokens)) {
      return abort_local(self, local, "the head named " + std::to_string(skip) + " of " +
                                          std::to_string(item.held_rows.size()) + " prompt tokens as the decode node's");
    }
    // What went out early must be what the request holds now.
    if (!std::equal(hand.sent_rows.begin(), hand.sent_rows.end(), item.held_rows.begin() + skip)) {
      return abort_local(self, local, "a streamed prompt's KV rows moved before its transfer ended");
    }
    rows.assign(item.held_rows.begin() + skip + static_cast<ptrdiff_t>(sent), item.held_rows.end());
  }
  fb::KvSendOrderT order;
  order.ticket = hand.ticket;
  order.address = hand.address;
  order.rows = std::move(rows);
  order.streaming = progress;
  order.ready_step = progress ? item.held_step : 0;
  order.total_tokens = hand.prompt_tokens - skip;
  if (!progress) {
    order.first_token = item.token_ids[0];
    order.first_logprob = item.logprobs.empty() ? 0.0f : item.logprobs[0];
    order.cached_tokens = item.usage ? item.usage->cached_tokens : 0;
  }
  if (hand.streaming) {
    // Its transfer is open: this extends it; the first order's answer
    // still ends it.
    if (hand.sending) self->send(s.kv_sender, kv_send_more_atom::value, WireMessage{msg::pack(order)});
    return;
  }
  h->second.streaming = progress;
  h->second.sending = true;
  // Until the answer, nothing else may let the held rows go.
  auto answered = [self, local] {
    auto& s = self->state;
    if (auto h = s.handoffs.find(local); h != s.handoffs.end()) h->second.sending = false;
    if (!s.fenced.count(local)) return false;
    release_fence(self, local);  // aborted meanwhile: the abort goes through now
    return true;
  };
  self->request(s.kv_sender, caf::infinite, kv_send_atom::value, WireMessage{msg::pack(order)})
      .then(
          [self, local, answered](const std::string& error) {
            auto& s = self->state;
            if (answered()) return;
            if (!error.empty()) return abort_local(self, local, "KV transfer failed: " + error);
            fb::KvHandoffT release;
            release.request_id = local;
            self->send(s.scheduler, kv_release_atom::value, WireMessage{msg::pack(release)});
            auto route = s.routes.find(local);
            if (route == s.routes.end()) return;
            auto head = s.heads.find(route->second.head);
            fb::TokenStreamT done;
            done.items.push_back(std::make_unique<fb::TokenStreamItemT>());
            done.items[0]->request_id = route->second.head_id;
            done.items[0]->held = true;
            if (head != s.heads.end()) self->send(head->second.router, stream_atom::value, WireMessage{msg::pack(done)});
            forget(s, local);
          },
          [self, local, answered](const caf::error& e) {
            if (answered()) return;
            abort_local(self, local, "KV transfer failed: " + self->system().render(e));
          });
}

// A request that streamed its prompt's KV and ended at the scheduler (a stop
// at its first token, an error, a preemption) kept its rows there
// (Scheduler::park): they go once its transfer has stopped reading them.
void release_streamed(Self* self, uint64_t local) {
  auto& s = self->state;
  auto h = s.handoffs.find(local);
  if (h == s.handoffs.end() || !h->second.progressed || s.cancelled.count(local)) return;
  if (!h->second.sending) return cancel_at_scheduler(self, false, {local}, "its request ended");
  if (s.fenced.emplace(local, GatewayState::Fenced{false, "its request ended"}).second) {
    self->send(s.kv_sender, kv_send_stop_atom::value, h->second.ticket);
  }
}

// The scheduler's TokenStream, split by head, with the heads' own ids.
void on_stream(Self* self, const WireMessage& in) {
  auto& s = self->state;
  if (!from_this_process(self)) {
    std::fprintf(stderr, "actorlm %s: dropped a token stream from outside the node\n", s.label.c_str());
    return;
  }
  std::string error;
  auto ts = msg::unpack<fb::TokenStream>(in.bytes, &error);
  if (!ts) return;
  std::map<caf::actor_addr, fb::TokenStreamT> out;
  for (auto& item : ts->items) {
    auto it = s.routes.find(item->request_id);
    if (it == s.routes.end()) continue;  // its head is gone
    if (item->held || item->held_progress) {
      send_held(self, item->request_id, *item);
      continue;
    }
    const bool done = item->finish_reason != fb::FinishReason::None;
    if (done) release_streamed(self, it->first);
    if (item->finish_reason == fb::FinishReason::Abort && item->error.empty()) {
      if (auto why = s.abort_reasons.find(it->first); why != s.abort_reasons.end()) {
        item->error = why->second;
        item->error_kind = fb::ErrorKind::Unavailable;
      }
    }
    const Route route = it->second;
    item->request_id = route.head_id;
    out[route.head].items.push_back(std::move(item));
    if (done) forget(s, it->first);
  }
  for (auto& [addr, stream] : out) {
    auto head = s.heads.find(addr);
    if (head != s.heads.end()) self->send(head->second.router, stream_atom::value, WireMessage{msg::pack(stream)});
  }
}

// Decode side. A head reserves rows for a request whose KV a prefill node
// will send; the answer carries the ticket that node must name.
caf::result<WireMessage> on_reserve(Self* self, const WireMessage& sealed) {
  auto& s = self->state;
  WireMessage in;
  Head* head = sealed_sender(self, RequestKind::kv_reserve, sealed, in.bytes, "a KV reservation");
  if (!head) return caf::sec::request_receiver_down;
  fb::KvReserveReplyT reply;
  auto refuse = [&](const std::string& why) {
    reply.error = why;
    return WireMessage{msg::pack(reply)};
  };
  if (!s.receiver) return refuse("this node takes no KV transfers (a worker node, or a backend without them)");
  std::string error;
  auto req = msg::unpack<fb::TokenizedRequest>(in.bytes, &error);
  if (!req) return refuse("unreadable reservation: " + error);
  const uint64_t head_id = reply.request_id = req->request_id;
  // The prompt's ids are checked by Scheduler::reserve (its refusal).
  const caf::actor_addr from = sender_of(self);
  if (s.local_ids.count({from, head_id})) return refuse("request id " + std::to_string(head_id) + " is already running");
  const uint64_t local = admit(s, from, *head, head_id);
  req->request_id = local;
  req->hold_after_prefill = false;
  auto rp = self->make_response_promise<WireMessage>();
  self->request(s.scheduler, std::chrono::seconds(30), kv_reserve_atom::value, WireMessage{msg::pack(*req)})
      .then(
          [self, rp, local, head_id](const WireMessage& m) mutable {
            auto& s = self->state;
            fb::KvReserveReplyT out;
            out.request_id = head_id;
            auto r = msg::unpack<fb::KvReserveReply>(m.bytes, &out.error);
            if (r) out.error = r->error, out.no_room = r->no_room;
            if (!out.error.empty() || !s.routes.count(local)) {
              if (out.error.empty()) out.error = "the head went away";
              forget(s, local);
            } else {
              // Only the rows after the decode node's own cached prefix are sent.
              const auto cached = static_cast<size_t>(std::clamp<int32_t>(r->cached_tokens, 0, static_cast<int32_t>(r->rows.size()) - 1));
              out.cached_tokens = static_cast<int32_t>(cached);
              out.ticket = s.receiver->open(local, std::vector<int32_t>(r->rows.begin() + static_cast<long>(cached), r->rows.end()));
            }
            rp.deliver(WireMessage{msg::pack(out)});
          },
          [self, rp, local, head_id](const caf::error& e) mutable {
            forget(self->state, local);
            fb::KvReserveReplyT out;
            out.request_id = head_id;
            out.error = "reservation: " + self->system().render(e);
            rp.deliver(WireMessage{msg::pack(out)});
          });
  return rp;
}

// A chunk from a prefill node (joined here as a head is): checked, then
// written to the reserved rows. A bad chunk fails its request, so the head
// sees the abort and retries or reports it.
caf::result<std::string> on_chunk(Self* self, const WireMessage& sealed) {
  auto& s = self->state;
  WireMessage in;
  if (!sealed_sender(self, RequestKind::kv_chunk, sealed, in.bytes, "a KV chunk")) return caf::sec::request_receiver_down;
  if (!s.receiver) return std::string("this node takes no KV transfers");
  KvReceiver::Taken taken = s.receiver->take(in.bytes);
  if (!taken.write) {
    std::fprintf(stderr, "actorlm %s: refused a KV chunk: %s\n", s.label.c_str(), taken.error.c_str());
    if (taken.request_id) abort_local(self, taken.request_id, "KV transfer refused: " + taken.error);
    return taken.error;
  }
  fb::KvRowsRequestT write;
  write.rows = std::move(taken.write->rows);
  write.first_layer = taken.write->first_layer;
  write.last_layer = taken.write->last_layer;
  write.data = std::move(taken.write->data);
  auto rp = self->make_response_promise<std::string>();
  const uint64_t local = taken.request_id;
  self->request(s.kv_worker, std::chrono::seconds(30), kv_write_atom::value, WireMessage{msg::pack(write)})
      .then(
          [self, rp, local](const WireMessage& m) mutable {
            std::string error;
            auto r = msg::unpack<fb::KvRowsReply>(m.bytes, &error);
            if (r) error = r->error;
            if (!error.empty()) abort_local(self, local, "writing transferred KV: " + error);
            rp.deliver(error);
          },
          [self, rp, local](const caf::error& e) mutable {
            abort_local(self, local, "writing transferred KV: " + self->system().render(e));
            rp.deliver("writing KV: " + self->system().render(e));
          });
  // The write is in the worker's mailbox now, ahead of any step the
  // scheduler sends after an abort frees these rows (one mailbox, in order),
  // so as far as the fence goes it has landed.
  if (s.receiver->landed(taken.ticket)) release_fence(self, local);
  return rp;
}

// The prefill node's last word: every chunk is in, here is the first token.
caf::result<std::string> on_commit(Self* self, const WireMessage& sealed) {
  auto& s = self->state;
  WireMessage in;
  if (!sealed_sender(self, RequestKind::kv_commit, sealed, in.bytes, "a KV commit")) return caf::sec::request_receiver_down;
  if (!s.receiver) return std::string("this node takes no KV transfers");
  std::string error;
  auto h = msg::unpack<fb::KvHandoff>(in.bytes, &error);
  if (!h) return "unreadable KV commit: " + error;
  KvReceiver::Committed c = s.receiver->commit(h->request_id);
  if (!c.error.empty()) {
    if (c.request_id) abort_local(self, c.request_id, "KV transfer incomplete: " + c.error);
    return c.error;
  }
  h->request_id = c.request_id;
  auto rp = self->make_response_promise<std::string>();
  const uint64_t local = c.request_id;
  self->request(s.scheduler, std::chrono::seconds(30), kv_activate_atom::value, WireMessage{msg::pack(*h)})
      .then(
          [self, rp, local](bool ok) mutable {
            if (!ok) abort_local(self, local, "the transferred request could not start");
            rp.deliver(ok ? std::string() : std::string("the request could not start (first token out of range, or gone)"));
          },
          [self, rp, local](const caf::error& e) mutable {
            abort_local(self, local, "activation: " + self->system().render(e));
            rp.deliver("activation: " + self->system().render(e));
          });
  return rp;
}

// --- Live migration (a drain), source side ------------------------------
// The head freezes a running request here (kv_freeze), reserves rows on
// another node, then orders its KV sent there (kv_move); the sender's
// commit starts it there with no first token. Once that node has it, the
// scheduler releases it here (counted as migrated out) and its route is
// forgotten: nothing more about it comes from this node. A failed send puts
// it back in the batch (thaw) and the head hears why.

// The local id of the head's request a sealed KvMove names, or 0.
uint64_t move_target(Self* self, RequestKind kind, const WireMessage& sealed, fb::KvMoveT& move) {
  auto& s = self->state;
  WireMessage in;
  if (!sealed_sender(self, kind, sealed, in.bytes, "a migration order")) return 0;
  std::string error;
  auto m = msg::unpack<fb::KvMove>(in.bytes, &error);
  if (!m) {
    std::fprintf(stderr, "actorlm %s: rejected a migration order: %s\n", s.label.c_str(), error.c_str());
    return 0;
  }
  move = std::move(*m);
  auto it = s.local_ids.find({sender_of(self), move.request_id});
  return it == s.local_ids.end() ? 0 : it->second;
}

caf::result<WireMessage> on_freeze(Self* self, const WireMessage& sealed) {
  auto& s = self->state;
  fb::KvMoveT move;
  const uint64_t local = move_target(self, RequestKind::kv_freeze, sealed, move);
  fb::KvFreezeReplyT unknown;
  unknown.state = 3;
  if (local == 0 || !s.scheduler || !s.kv_sender || s.handoffs.count(local)) return WireMessage{msg::pack(unknown)};
  fb::KvMoveT order;
  order.request_id = local;
  auto rp = self->make_response_promise<WireMessage>();
  self->request(s.scheduler, std::chrono::seconds(30), kv_freeze_atom::value, WireMessage{msg::pack(order)})
      .then(
          [self, rp, local](const WireMessage& m) mutable {
            auto& s = self->state;
            fb::KvFreezeReplyT r;
            r.state = 3;
            if (auto got = msg::unpack<fb::KvFreezeReply>(m.bytes, nullptr)) r = std::move(*got);
            if (r.state == 0) {
              Handoff h;
              h.migrating = true;
              h.rows = std::move(r.rows);
              h.cached_tokens = r.cached_tokens;
              s.handoffs[local] = std::move(h);
            } else if (r.state == 1) {
              forget(s, local);  // dropped by the scheduler: it starts again elsewhere
            }
            r.rows.clear();
            rp.deliver(WireMessage{msg::pack(r)});
          },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

void thaw_local(Self* self, uint64_t local) {
  auto& s = self->state;
  s.handoffs.erase(local);
  fb::KvMoveT order;
  order.request_id = local;
  self->send(s.scheduler, kv_thaw_atom::value, WireMessage{msg::pack(order)});
}

caf::result<std::string> on_move(Self* self, const WireMessage& sealed) {
  auto& s = self->state;
  fb::KvMoveT move;
  const uint64_t local = move_target(self, RequestKind::kv_move, sealed, move);
  auto h = s.handoffs.find(local);
  if (local == 0 || h == s.handoffs.end() || !h->second.migrating || h->second.sending) {
    return std::string("no frozen request by that id here");
  }
  if (move.ticket == 0 || move.address.empty() || move.skip < 0 ||
      static_cast<size_t>(move.skip) >= h->second.rows.size()) {
    thaw_local(self, local);
    return std::string("a migration order without a ticket, an address, or a sane skip");
  }
  fb::KvSendOrderT order;
  order.ticket = h->second.ticket = move.ticket;
  order.address = h->second.address = move.address;
  order.rows.assign(h->second.rows.begin() + move.skip, h->second.rows.end());
  order.first_token = -1;  // it goes on from its output there
  order.cached_tokens = h->second.cached_tokens;
  h->second.sending = true;
  auto rp = self->make_response_promise<std::string>();
  self->request(s.kv_sender, caf::infinite, kv_send_atom::value, WireMessage{msg::pack(order)})
      .then(
          [self, rp, local](const std::string& error) mutable {
            auto& s = self->state;
            auto h = s.handoffs.find(local);
            if (h != s.handoffs.end()) h->second.sending = false;
            if (s.fenced.count(local)) {
              // Aborted while its rows were being read: the abort goes
              // through now, and the head has asked for it there too.
              release_fence(self, local);
              rp.deliver(std::string("aborted during the move"));
              return;
            }
            if (!error.empty()) {
              thaw_local(self, local);
              rp.deliver("KV transfer failed: " + error);
              return;
            }
            s.handoffs.erase(local);
            fb::KvHandoffT release;
            release.request_id = local;
            self->send(s.scheduler, kv_release_atom::value, WireMessage{msg::pack(release)});
            forget(s, local);
            rp.deliver(std::string());
          },
          [self, rp, local](caf::error& e) mutable {
            auto& s = self->state;
            if (auto h = s.handoffs.find(local); h != s.handoffs.end()) h->second.sending = false;
            if (s.fenced.count(local)) {
              release_fence(self, local);
            } else {
              thaw_local(self, local);
            }
            rp.deliver("KV transfer failed: " + self->system().render(e));
          });
  return rp;
}

void on_thaw(Self* self, const WireMessage& sealed) {
  fb::KvMoveT move;
  const uint64_t local = move_target(self, RequestKind::kv_thaw, sealed, move);
  auto h = self->state.handoffs.find(local);
  // While its KV is being sent, the send's outcome decides.
  if (local != 0 && h != self->state.handoffs.end() && h->second.migrating && !h->second.sending) thaw_local(self, local);
}

void drop_head(Self* self, uint64_t gone_token, const std::string& why) {
  auto& s = self->state;
  auto head = s.heads.begin();
  while (head != s.heads.end() && head->second.gone_token != gone_token) ++head;
  if (head == s.heads.end()) return;  // an earlier join of a head that joined again, or a guess
  const caf::actor_addr addr = head->first;
  fb::AbortT abort;
  for (const auto& [local, route] : s.routes) {
    if (route.head == addr) abort.request_ids.push_back(local);
  }
  std::fprintf(stderr, "actorlm %s: head %s left (%s); aborting its %zu request(s)\n", s.label.c_str(),
               head->second.name.c_str(), why.c_str(), abort.request_ids.size());
  if (!abort.request_ids.empty()) cancel_at_scheduler(self, false, abort.request_ids, "the head went away");
  for (uint64_t id : abort.request_ids) forget(s, id);
  if (s.decode && s.decode->sessions && head->second.data_session) s.decode->sessions->remove(head->second.data_session);
  s.heads.erase(head);
}

// A head loads or drops a LoRA adapter on this node (its POST
// /v1/load_lora_adapter): checked here (NodeAdapters), done by the
// scheduler between two steps, and the welcome then lists the node's new
// set for heads that join later. The node's other joined heads hear of it
// (AdapterNews), so a change made through one head reaches them all.
// Answered with an AdapterReply.
caf::result<WireMessage> on_adapter_change(Self* self, const WireMessage& in, const caf::actor_addr& from) {
  auto& s = self->state;
  auto answer = [](std::string why) {
    fb::AdapterReplyT r;
    r.error = std::move(why);
    return WireMessage{msg::pack(r)};
  };
  std::string error;
  auto change = msg::unpack<fb::AdapterChange>(in.bytes, &error);
  if (!change) return answer("unreadable adapter change: " + error);
  if (!s.scheduler) return answer(s.label + " is a worker node: its head's scheduler holds its adapters");
  if (s.mode == "decode") return answer(s.label + " is a decode node, which runs no adapters");
  auto sent = std::make_shared<fb::AdapterChangeT>(*change);
  if (std::string why = s.adapters.admit(*change); !why.empty()) return answer(s.label + ": " + why);
  auto rp = self->make_response_promise<WireMessage>();
  auto settle = [self, rp, from, sent, change = std::make_shared<fb::AdapterChangeT>(*change)](fb::AdapterReplyT reply) mutable {
    auto& s = self->state;
    s.adapters.settle(*change, reply);
    if (reply.error.empty()) {
      if (auto w = msg::unpack<fb::NodeWelcome>(s.welcome, nullptr)) {
        s.adapters.describe(*w);
        s.welcome = msg::pack(*w);
      }
      std::fprintf(stderr, "actorlm %s: LoRA adapter %s #%d %s by a head\n", s.label.c_str(), change->name.c_str(),
                   change->id, change->load ? "loaded" : "dropped");
      const WireMessage news{msg::pack(s.adapters.news(*sent, reply))};
      for (const auto& [addr, head] : s.heads) {
        if (addr != from) self->send(head.router, adapter_news_atom::value, news);
      }
    } else {
      reply.error = s.label + ": " + reply.error;
    }
    rp.deliver(WireMessage{msg::pack(reply)});
  };
  // The worker reads the file between two steps; a big one takes a while.
  self->request(s.scheduler, std::chrono::minutes(10), adapter_atom::value, WireMessage{msg::pack(*change)})
      .then(
          [settle](const WireMessage& m) mutable {
            std::string why;
            auto r = msg::unpack<fb::AdapterReply>(m.bytes, &why);
            if (!r) {
              fb::AdapterReplyT bad;
              bad.error = "unreadable answer from the scheduler: " + why;
              return settle(std::move(bad));
            }
            settle(std::move(*r));
          },
          [self, settle](const caf::error& e) mutable {
            fb::AdapterReplyT bad;
            bad.error = "the scheduler did not answer: " + self->system().render(e);
            settle(std::move(bad));
          });
  return rp;
}

caf::behavior gateway(Self* self, std::string secret, uint64_t stop_token, std::shared_ptr<KvDecodeShared> decode,
                      AdapterDir lora_dir, int64_t max_lora_bytes) {
  self->state.secret = std::move(secret);
  self->state.decode = std::move(decode);
  self->state.adapters = NodeAdapters(std::move(lora_dir), max_lora_bytes);
  self->state.label = "node";
  return {
      [self, stop_token](shutdown_atom, uint64_t token) {
        if (token == stop_token) self->quit(caf::exit_reason::user_shutdown);
      },
      [self](attach_atom, const caf::actor& target, const caf::actor& kv_worker, const caf::actor& kv_sender,
             const WireMessage& welcome, const std::string& label, bool stream_kv, const std::vector<int64_t>& adapter_bytes) {
        // Once, from this process: what a node serves is not a peer's to change.
        auto& s = self->state;
        if (!from_this_process(self) || !s.welcome.empty()) return;
        s.label = label;
        auto w = msg::unpack<fb::NodeWelcome>(welcome.bytes, nullptr);
        if (!w) return;
        (w->role == "worker" ? s.worker : s.scheduler) = target;
        s.welcome = welcome.bytes;
        s.mode = w->disaggregation_mode;
        s.kv_worker = kv_worker;
        s.kv_sender = kv_sender;
        s.stream_kv = stream_kv;
        std::vector<NodeAdapter> loaded;
        for (size_t k = 0; k < w->adapters.size(); ++k) {
          const auto& a = *w->adapters[k];
          loaded.push_back({a.name, a.id, a.fingerprint, k < adapter_bytes.size() ? adapter_bytes[k] : 0});
        }
        s.adapters.started_with(std::move(loaded));
        if (s.scheduler && w->kv_token_bytes > 0) {
          // Every engine node takes KV: a decode node from prefill nodes,
          // any node a running request migrating to it.
          NodeModel m{w->model_name, w->vocab_size, w->n_layers, w->hidden, w->tokenizer_digest};
          const KvLayout layout{kv_model_digest(m), w->kv_dtype, w->n_layers, w->kv_token_bytes};
          s.receiver = s.decode && s.decode->receiver ? s.decode->receiver : std::make_shared<KvReceiver>(layout);
        }
      },
      [self](hello_atom, const WireMessage& in) -> WireMessage {
        auto& s = self->state;
        auto hello = msg::open<fb::NodeHello>(in.bytes);
        if (!hello) return {refusal("unreadable hello: " + hello.error)};
        if (hello.message->protocol() != cluster_protocol) {
          return {refusal("cluster protocol " + std::to_string(hello.message->protocol()) + " is not this node's " +
                          std::to_string(cluster_protocol))};
        }
        // Full: drop one at random-ish (nonces are random), so a flood cannot
        // pin the set and a real head's challenge most likely survives it.
        if (s.challenges.size() >= max_pending_challenges) s.challenges.erase(s.challenges.begin());
        fb::NodeChallengeT c;
        c.protocol = cluster_protocol;
        c.nonce = make_nonce();
        s.challenges.insert(c.nonce);
        return {msg::pack(c)};
      },
      [self](join_atom, const WireMessage& in) -> WireMessage {
        auto& s = self->state;
        const caf::actor_addr from = sender_of(self);
        std::string error;
        auto join = msg::unpack<fb::NodeJoin>(in.bytes, &error);
        auto challenge = join ? s.challenges.find(join->nonce) : s.challenges.end();
        std::string why;
        if (!join) {
          why = "unreadable join: " + error;
        } else if (challenge == s.challenges.end()) {
          why = "join without a matching hello";
        } else if (!proof_matches(s.secret, *challenge, join->proof)) {
          why = "the shared secret does not match";
        } else if (join->head_nonce.size() != nonce_bytes) {
          why = "a join without the head's nonce (cluster protocol " + std::to_string(cluster_protocol) + " needs one)";
        } else if (s.welcome.empty()) {
          why = "the node is still starting";
        } else if (s.heads.count(from)) {
          // A join names its sender, and that is a claim: a second join for
          // an actor that has a session would let a peer replace it.
          why = "this head has joined already";
        } else if (s.worker && !s.heads.empty()) {
          why = "this worker node is driven by " + s.heads.begin()->second.name + " already";
        }
        if (challenge != s.challenges.end()) s.challenges.erase(challenge);  // one join per nonce
        if (!why.empty()) {
          std::fprintf(stderr, "actorlm %s: refused a head: %s\n", s.label.c_str(), why.c_str());
          return {refusal("refused by " + s.label + ": " + why)};
        }
        Head& head = s.heads[from];
        head.router = caf::actor_cast<caf::actor>(self->current_sender());
        head.name = join->head_name.substr(0, 200);
        std::vector<uint8_t> key = session_key(s.secret, join->nonce, join->head_nonce);
        if (s.decode && s.decode->sessions) head.data_session = s.decode->sessions->add(key);
        head.session = RequestSession(std::move(key));
        head.gone_token = random_token();
        // The proxy of the head's actor terminates when CAF loses the
        // connection it came over (closed, or heartbeats missed); only then
        // does this functor, in this process, tell the gateway.
        head.router->attach_functor(
            [gw = caf::actor_cast<caf::actor_addr>(self), token = head.gone_token](const caf::error& reason) {
              if (auto to = caf::actor_cast<caf::actor>(gw)) caf::anon_send(to, head_gone_atom::value, token, reason);
            });
        std::fprintf(stderr, "actorlm %s: head %s joined\n", s.label.c_str(), head.name.c_str());
        return {s.welcome};
      },
      [self](head_gone_atom, uint64_t token, const caf::error& reason) { drop_head(self, token, self->system().render(reason)); },
      [self](forward_atom a, const WireMessage& sealed) -> caf::result<WireMessage> {
        WireMessage in;
        if (!sealed_sender(self, RequestKind::forward, sealed, in.bytes, "a forward batch")) return caf::sec::request_receiver_down;
        if (!self->state.worker) return caf::sec::unexpected_message;
        auto rp = self->make_response_promise<WireMessage>();
        self->request(self->state.worker, caf::infinite, a, in)
            .then([rp](const WireMessage& m) mutable { rp.deliver(m); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self](generate_atom, const WireMessage& in) { on_generate(self, in); },
      [self](kv_reserve_atom, const WireMessage& in) { return on_reserve(self, in); },
      [self](kv_chunk_atom, const WireMessage& in) { return on_chunk(self, in); },
      [self](kv_data_failed_atom, uint64_t local, const std::string& why) {
        // From this node's data port only: a peer does not get to fail requests.
        if (!from_this_process(self) || !self->state.receiver) return;
        abort_local(self, local, "KV transfer failed: " + why);
      },
      [self](kv_landed_atom, uint64_t local) {
        if (from_this_process(self)) release_fence(self, local);
      },
      [self](kv_commit_atom, const WireMessage& in) { return on_commit(self, in); },
      [self](kv_freeze_atom, const WireMessage& in) { return on_freeze(self, in); },
      [self](kv_move_atom, const WireMessage& in) { return on_move(self, in); },
      [self](kv_thaw_atom, const WireMessage& in) { on_thaw(self, in); },
      [self](leaving_atom) -> caf::result<bool> {
        // From this process (the node's operator): every head moves this
        // node's requests elsewhere and routes nothing more here. The answer
        // comes once every head has answered: whatever a head routed here
        // before it stopped came before its answer, so is counted by then.
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        auto rp = self->make_response_promise<bool>();
        auto pending = std::make_shared<size_t>(self->state.heads.size());
        if (*pending == 0) rp.deliver(true);
        for (const auto& [addr, head] : self->state.heads) {
          self->request(head.router, std::chrono::seconds(10), leaving_atom::value)
              .then([rp, pending](bool) mutable { if (--*pending == 0) rp.deliver(true); },
                    [rp, pending](const caf::error&) mutable { if (--*pending == 0) rp.deliver(true); });
        }
        return rp;
      },
      [self](status_atom) -> caf::result<int32_t> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        return static_cast<int32_t>(self->state.routes.size());
      },
      [self](abort_atom a, const WireMessage& in) { on_cancel(self, a, in); },
      [self](stop_atom a, const WireMessage& in) { on_cancel(self, a, in); },
      [self](stream_atom, const WireMessage& in) { on_stream(self, in); },
      [self](stats_atom a, const WireMessage& sealed) -> caf::result<WireMessage> {
        WireMessage in;
        if (!sealed_sender(self, RequestKind::stats, sealed, in.bytes, "a stats request")) return caf::sec::request_receiver_down;
        auto rp = self->make_response_promise<WireMessage>();
        self->request(self->state.scheduler, std::chrono::seconds(30), a, in)
            .then([rp](const WireMessage& m) mutable { rp.deliver(m); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self](adapter_atom, const WireMessage& sealed) -> caf::result<WireMessage> {
        WireMessage in;
        if (!sealed_sender(self, RequestKind::adapter, sealed, in.bytes, "an adapter change")) return caf::sec::request_receiver_down;
        return on_adapter_change(self, in, sender_of(self));
      },
      [self](flush_atom a, const WireMessage& sealed) -> caf::result<int64_t> {
        WireMessage empty;
        if (!sealed_sender(self, RequestKind::flush, sealed, empty.bytes, "a flush")) return caf::sec::request_receiver_down;
        auto rp = self->make_response_promise<int64_t>();
        self->request(self->state.scheduler, std::chrono::seconds(30), a)
            .then([rp](int64_t freed) mutable { rp.deliver(freed); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
  };
}

// The gateway with its mailbox's door shut to exit and down messages. Any
// peer can send either, naming any actor (the sender and source fields are
// the peer's claims), and CAF acts on them before the behavior sees them:
// an exit message with exit_reason::kill ends an actor whatever its exit
// handler says. The gateway links to nothing, learns that heads went away
// from functors attached to their proxies, and stops on a shutdown message
// carrying a token only its owner holds, so it needs neither.
class GatewayActor : public Self {
 public:
  GatewayActor(caf::actor_config& cfg, std::string secret, uint64_t stop_token, std::shared_ptr<KvDecodeShared> decode,
               AdapterDir lora_dir, int64_t max_lora_bytes)
      : Self(cfg),
        secret_(std::move(secret)),
        stop_token_(stop_token),
        decode_(std::move(decode)),
        lora_dir_(std::move(lora_dir)),
        max_lora_bytes_(max_lora_bytes) {}

  caf::behavior make_behavior() override {
    return gateway(this, std::move(secret_), stop_token_, std::move(decode_), std::move(lora_dir_), max_lora_bytes_);
  }

  using Self::enqueue;
  void enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit* eu) override {
    if (ptr && (ptr->content().match_elements<caf::exit_msg>() || ptr->content().match_elements<caf::down_msg>())) {
      std::fprintf(stderr, "actorlm %s: dropped an exit or down message\n", state.label.c_str());
      return;
    }
    Self::enqueue(std::move(ptr), eu);
  }

 private:
  std::string secret_;
  uint64_t stop_token_;
  std::shared_ptr<KvDecodeShared> decode_;
  AdapterDir lora_dir_;
  int64_t max_lora_bytes_;
};

}  // namespace

caf::actor spawn_node_gateway(caf::actor_system& system, std::string secret, uint64_t stop_token,
                              std::shared_ptr<KvDecodeShared> decode, AdapterDir lora_dir, int64_t max_lora_bytes) {
  return system.spawn<GatewayActor>(std::move(secret), stop_token, std::move(decode), std::move(lora_dir), max_lora_bytes);
}

}  // namespace actorlm
