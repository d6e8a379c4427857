#include "actors/node_gateway.hpp"

#include <caf/all.hpp>
#include <cstdio>
#include <map>

#include "actors/stream_messages.hpp"
#include "actors/wire.hpp"
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
};

struct Route {
  caf::actor_addr head;
  uint64_t head_id = 0;
};

struct GatewayState {
  std::string secret, label;
  caf::actor scheduler;          // an engine node's; requests go here
  caf::actor worker;             // a worker node's; one head drives it with forward batches

  std::vector<uint8_t> welcome;  // NodeWelcome, accepted
  int32_t vocab_size = 0;
  std::map<caf::actor_addr, std::vector<uint8_t>> challenges;  // nonce per peer that said hello
  std::map<caf::actor_addr, Head> heads;                       // joined
  std::map<uint64_t, Route> routes;                            // by node-local id
  std::map<std::pair<caf::actor_addr, uint64_t>, uint64_t> local_ids;
  uint64_t next_id = 1;
  static inline const char* name = "actorlm.node_gateway";
};

using Self = caf::stateful_actor<GatewayState>;

caf::actor_addr sender_of(Self* self) { return caf::actor_cast<caf::actor_addr>(self->current_sender()); }

bool from_this_process(Self* self) {
  const auto& s = self->current_sender();
  return s && s->node() == self->node();
}

// The joined head that sent the current message, or nullptr (logged).
Head* joined_sender(Self* self, const char* what) {
  auto it = self->state.heads.find(sender_of(self));
  if (it != self->state.heads.end()) return &it->second;
  std::fprintf(stderr, "actorlm %s: dropped %s from a peer that has not joined\n", self->state.label.c_str(), what);
  return nullptr;
}

std::vector<uint8_t> refusal(const std::string& why) {
  fb::NodeWelcomeT w;
  w.accepted = false;
  w.error = why;
  return msg::pack(w);
}

void forget(GatewayState& s, uint64_t local_id) {
  auto it = s.routes.find(local_id);
  if (it == s.routes.end()) return;
  auto head = s.heads.find(it->second.head);
  if (head != s.heads.end() && head->second.requests > 0) --head->second.requests;
  s.local_ids.erase({it->second.head, it->second.head_id});
  s.routes.erase(it);
}

void on_generate(Self* self, const WireMessage& in) {
  auto& s = self->state;
  Head* head = joined_sender(self, "a request");
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
    self->send(head->router, stream_atom::value, WireMessage{error_stream({head_id}, why)});
  };
  if (req->input_ids.empty()) return answer_error("empty prompt");
  for (int32_t id : req->input_ids) {
    if (id < 0 || id >= s.vocab_size) return answer_error("token id " + std::to_string(id) + " is outside the vocabulary");
  }
  const caf::actor_addr from = sender_of(self);
  if (s.local_ids.count({from, head_id})) return answer_error("request id " + std::to_string(head_id) + " is already running");
  const uint64_t local = s.next_id++;
  s.routes[local] = Route{from, head_id};
  s.local_ids[{from, head_id}] = local;
  ++head->requests;
  req->request_id = local;
  self->send(s.scheduler, generate_atom::value, WireMessage{msg::pack(*req)}, caf::actor_cast<caf::actor>(self));
}

// An Abort (or stop) from a head, with its ids made node-local.
template <class Atom>
void on_cancel(Self* self, Atom atom, const WireMessage& in) {
  auto& s = self->state;
  if (!joined_sender(self, "an abort")) return;
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
  a->request_ids = local;
  self->send(s.scheduler, atom, WireMessage{msg::pack(*a)});
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
    const bool done = item->finish_reason != fb::FinishReason::None;
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

void drop_head(Self* self, const caf::actor_addr& addr, const std::string& why) {
  auto& s = self->state;
  auto head = s.heads.find(addr);
  if (head == s.heads.end()) return;
  fb::AbortT abort;
  for (const auto& [local, route] : s.routes) {
    if (route.head == addr) abort.request_ids.push_back(local);
  }
  for (uint64_t id : abort.request_ids) forget(s, id);
  std::fprintf(stderr, "actorlm %s: head %s left (%s); aborting its %zu request(s)\n", s.label.c_str(),
               head->second.name.c_str(), why.c_str(), abort.request_ids.size());
  if (!abort.request_ids.empty()) {
    abort.reason = "the head went away";
    self->send(s.scheduler, abort_atom::value, WireMessage{msg::pack(abort)});
  }
  s.heads.erase(head);
}

caf::behavior gateway(Self* self, std::string secret) {
  self->state.secret = std::move(secret);
  self->state.label = "node";
  self->set_down_handler([self](caf::down_msg& dm) { drop_head(self, dm.source, self->system().render(dm.reason)); });
  // Exit messages from other processes (a peer linking to the gateway, or
  // sending it an exit) are ignored: only this process may stop it.
  self->set_exit_handler([self](caf::exit_msg& m) {
    if (m.source && m.source.node() == self->node()) {
      self->quit(m.reason);
    } else {
      std::fprintf(stderr, "actorlm %s: ignored an exit message from another process\n", self->state.label.c_str());
    }
  });
  return {
      [self](attach_atom, const caf::actor& target, const WireMessage& welcome, const std::string& label) {
        if (!from_this_process(self)) return;
        self->state.label = label;
        auto w = msg::open<fb::NodeWelcome>(welcome.bytes);
        if (!w) return;
        const bool worker_role = w.message->role() && w.message->role()->str() == "worker";
        (worker_role ? self->state.worker : self->state.scheduler) = target;
        self->state.welcome = welcome.bytes;
        self->state.vocab_size = w.message->vocab_size();
      },
      [self](hello_atom, const WireMessage& in) -> WireMessage {
        auto& s = self->state;
        auto hello = msg::open<fb::NodeHello>(in.bytes);
        if (!hello) return {refusal("unreadable hello: " + hello.error)};
        if (hello.message->protocol() != cluster_protocol) {
          return {refusal("cluster protocol " + std::to_string(hello.message->protocol()) + " is not this node's " +
                          std::to_string(cluster_protocol))};
        }
        if (s.challenges.size() >= max_pending_challenges) s.challenges.erase(s.challenges.begin());
        fb::NodeChallengeT c;
        c.protocol = cluster_protocol;
        c.nonce = make_nonce();
        s.challenges[sender_of(self)] = c.nonce;
        return {msg::pack(c)};
      },
      [self](join_atom, const WireMessage& in) -> WireMessage {
        auto& s = self->state;
        const caf::actor_addr from = sender_of(self);
        auto challenge = s.challenges.find(from);
        std::string error;
        auto join = msg::unpack<fb::NodeJoin>(in.bytes, &error);
        std::string why;
        if (!join) {
          why = "unreadable join: " + error;
        } else if (challenge == s.challenges.end() || challenge->second != join->nonce) {
          why = "join without a matching hello";
        } else if (!proof_matches(s.secret, challenge->second, join->proof)) {
          why = "the shared secret does not match";
        } else if (s.welcome.empty()) {
          why = "the node is still starting";
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
        self->monitor(head.router);
        std::fprintf(stderr, "actorlm %s: head %s joined\n", s.label.c_str(), head.name.c_str());
        return {s.welcome};
      },
      [self](forward_atom a, const WireMessage& in) -> caf::result<WireMessage> {
        if (!joined_sender(self, "a forward batch")) return caf::sec::request_receiver_down;
        if (!self->state.worker) return caf::sec::unexpected_message;
        auto rp = self->make_response_promise<WireMessage>();
        self->request(self->state.worker, caf::infinite, a, in)
            .then([rp](const WireMessage& m) mutable { rp.deliver(m); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self](generate_atom, const WireMessage& in) { on_generate(self, in); },
      [self](abort_atom a, const WireMessage& in) { on_cancel(self, a, in); },
      [self](stop_atom a, const WireMessage& in) { on_cancel(self, a, in); },
      [self](stream_atom, const WireMessage& in) { on_stream(self, in); },
      [self](stats_atom a, const WireMessage& in) -> caf::result<WireMessage> {
        if (!joined_sender(self, "a stats request")) return caf::sec::request_receiver_down;
        auto rp = self->make_response_promise<WireMessage>();
        self->request(self->state.scheduler, std::chrono::seconds(30), a, in)
            .then([rp](const WireMessage& m) mutable { rp.deliver(m); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self](flush_atom a) -> caf::result<int64_t> {
        if (!joined_sender(self, "a flush")) return caf::sec::request_receiver_down;
        auto rp = self->make_response_promise<int64_t>();
        self->request(self->state.scheduler, std::chrono::seconds(30), a)
            .then([rp](int64_t freed) mutable { rp.deliver(freed); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
  };
}

}  // namespace

caf::actor spawn_node_gateway(caf::actor_system& system, std::string secret) {
  return system.spawn(gateway, std::move(secret));
}

}  // namespace actorlm
