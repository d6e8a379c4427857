#include "cluster/roles/worker_link.hpp"

#include <caf/all.hpp>
#include <map>
#include <optional>

#include "actors/wire.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/exit_proof_actor.hpp"
#include "actors/local_sender.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

struct LinkState {
  NodeAddress node;
  RemoteSecurity security;
  std::string head_name;
  std::chrono::milliseconds timeout{0};
  // The node's first welcome: a node that comes back must match it (the
  // head's pools were sized from it).
  std::optional<fb::NodeWelcomeT> first;
  // Lost after a join, and dialled again every second until it is back.
  bool rejoining = false;
  std::unique_ptr<TcpGate> gate;  // with a secret: CAF dials the node through it
  RequestSession session;         // seals every forward batch
  caf::actor gateway;
  // Names this link's join in the notice from the functor attached to the
  // gateway's proxy; never leaves the process (cluster/transport/exit_proof_actor.hpp).
  uint64_t gone_token = 0;
  uint64_t stop_token = 0;  // held by the engine
  std::optional<WireMessage> welcome;
  std::string failure;  // why there is no gateway (yet, or any more)
  std::string dial_failure;  // the last rejoin attempt's, logged when it changes
  std::vector<caf::response_promise> waiting;  // join queries before the outcome
  std::vector<caf::response_promise> back_waiting;  // worker_back queries while rejoining
  // Forwards the node has not answered: a lost node answers none of them,
  // so the notice that it went fails them.
  std::map<uint64_t, caf::response_promise> in_flight;
  uint64_t next = 0;
  static inline const char* name = "actorlm.worker_link";
};

using Self = caf::stateful_actor<LinkState>;

// The welcome while the node is joined, else why not, to every query in `queue`.
void answer(Self* self, std::vector<caf::response_promise>& queue) {
  for (auto& rp : queue) {
    if (self->state.gateway && self->state.welcome) {
      rp.deliver(*self->state.welcome);
    } else {
      rp.deliver(caf::make_error(caf::sec::runtime_error, self->state.failure));
    }
  }
  queue.clear();
}

// Why a node that came back cannot serve this head: its pools were sized
// from the first welcome, and the model must be the same.
std::string differs(const fb::NodeWelcomeT& a, const fb::NodeWelcomeT& b) {
  if (a.role != b.role || a.model_name != b.model_name || a.vocab_size != b.vocab_size || a.n_layers != b.n_layers ||
      a.hidden != b.hidden || a.tokenizer_digest != b.tokenizer_digest) {
    return "it came back with another model";
  }
  if (a.kv_tokens != b.kv_tokens || a.page_size != b.page_size || a.max_requests != b.max_requests ||
      a.max_context != b.max_context) {
    return "it came back with another KV layout (pool, page size, slots or context)";
  }
  // The head's scheduler names adapters by the ids of the first welcome.
  if (adapter_list(a) != adapter_list(b)) return "it came back with other LoRA adapters";
  return "";
}

void dial(Self* self);

void joined(Self* self, const caf::actor& gateway, const fb::NodeWelcomeT& w, RequestSession session) {
  auto& s = self->state;
  if (s.first) {
    if (auto why = differs(*s.first, w); !why.empty()) {
      // Not this head's worker any more: lost for good.
      s.rejoining = false;
      s.failure = "worker node " + s.node.str() + " cannot serve this head again: " + why;
      std::fprintf(stderr, "actorlm head: %s\n", s.failure.c_str());
      answer(self, self->state.back_waiting);
      return;
    }
  }
  s.gateway = gateway;
  s.session = std::move(session);
  s.gone_token = random_token();
  // Runs in this process when CAF loses the connection to the node.
  gateway->attach_functor([link = caf::actor_cast<caf::actor_addr>(self), token = s.gone_token](const caf::error& reason) {
    if (auto to = caf::actor_cast<caf::actor>(link)) caf::anon_send(to, node_gone_atom::value, token, reason);
  });
  s.welcome = WireMessage{msg::pack(w)};
  if (s.rejoining) {
    s.rejoining = false;
    s.failure.clear();
    s.dial_failure.clear();
    std::fprintf(stderr, "actorlm head: worker node %s joined again; its KV starts empty\n", s.node.str().c_str());
  } else {
    s.first = w;
  }
  answer(self, self->state.waiting);
  answer(self, self->state.back_waiting);
}

void dial(Self* self) {
  auto& s = self->state;
  join_node(
      self, s.node, s.gate.get(), s.security.secret, s.head_name, s.timeout,
      [self](const caf::actor& gateway, const fb::NodeWelcomeT& w, RequestSession session) {
        joined(self, gateway, w, std::move(session));
      },
      [self](const std::string& why) {
        auto& s = self->state;
        if (s.rejoining) {
          // Each new reason once, not every second.
          if (why != s.dial_failure) std::fprintf(stderr, "actorlm head: worker node %s: %s\n", s.node.str().c_str(), why.c_str());
          s.dial_failure = why;
          // Again in a second, for as long as the link lives; the steps
          // waiting for it give up on their own deadline.
          self->delayed_send(self, std::chrono::seconds(1), dial_atom::value);
          return;
        }
        s.failure = "cannot join " + s.node.str() + ": " + why;
        answer(self, self->state.waiting);
      });
}

void lose_node(Self* self, const caf::error& reason) {
  auto& s = self->state;
  s.gateway = caf::actor{};
  s.welcome.reset();
  s.rejoining = true;
  s.failure = "worker node " + s.node.str() + " was lost: " + self->system().render(reason);
  std::fprintf(stderr, "actorlm head: %s; dialling it again\n", s.failure.c_str());
  // A distinct code: the scheduler waits for the node to come back
  // (actors/actor_worker.hpp) rather than failing the step's requests.
  for (auto& [id, rp] : s.in_flight) rp.deliver(caf::make_error(caf::sec::no_route_to_receiving_node, s.failure));
  s.in_flight.clear();
  dial(self);
}

caf::behavior worker_link(Self* self, NodeAddress node, RemoteSecurity security, std::string head_name,
                          std::chrono::milliseconds timeout, uint64_t stop_token) {
  self->state.node = node;
  self->state.security = std::move(security);
  self->state.head_name = std::move(head_name);
  self->state.timeout = timeout;
  self->state.stop_token = stop_token;
  try {
    self->state.gate = open_dial_gate(node, self->state.security);
  } catch (const std::exception& e) {
    self->state.failure = "cannot join " + node.str() + ": " + e.what();
  }
  if (self->state.failure.empty()) dial(self);
  return {
      [self](join_atom) -> caf::result<WireMessage> {
        if (self->state.welcome) return *self->state.welcome;
        if (!self->state.failure.empty()) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        self->state.waiting.push_back(self->make_response_promise());
        return self->state.waiting.back();
      },
      [self](node_gone_atom, uint64_t token, const caf::error& reason) {
        if (self->state.gateway && token == self->state.gone_token) lose_node(self, reason);
      },
      [self](dial_atom) {
        // Only this actor's own timer asks, from this process.
        if (from_this_process(self) && self->state.rejoining && !self->state.gateway) dial(self);
      },
      [self](worker_back_atom) -> caf::result<WireMessage> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        if (self->state.gateway && self->state.welcome) return *self->state.welcome;
        if (!self->state.rejoining) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        self->state.back_waiting.push_back(self->make_response_promise());
        return self->state.back_waiting.back();
      },
      [self](shutdown_atom, uint64_t token) {
        if (token == self->state.stop_token) self->quit(caf::exit_reason::user_shutdown);
      },
      [self](forward_atom a, const WireMessage& in) -> caf::result<WireMessage> {
        // Only the head's own scheduler drives the node.
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        if (!self->state.gateway) {
          return caf::make_error(self->state.rejoining ? caf::sec::no_route_to_receiving_node : caf::sec::runtime_error,
                                 self->state.failure);
        }
        const uint64_t id = self->state.next++;
        auto rp = self->make_response_promise();
        self->state.in_flight.emplace(id, rp);
        auto settle = [self, id](auto&& reply) {
          auto it = self->state.in_flight.find(id);
          if (it == self->state.in_flight.end()) return;  // already failed: the node was lost
          it->second.deliver(std::forward<decltype(reply)>(reply));
          self->state.in_flight.erase(it);
        };
        self->request(self->state.gateway, caf::infinite, a, WireMessage{self->state.session.seal(RequestKind::forward, in.bytes)})
            .then([settle](const WireMessage& m) { settle(m); }, [settle](caf::error& e) { settle(std::move(e)); });
        return caf::delegated<WireMessage>{};
      },
  };
}

}  // namespace

caf::actor spawn_worker_link(caf::actor_system& system, NodeAddress node, RemoteSecurity security, std::string head_name,
                             std::chrono::milliseconds timeout, uint64_t stop_token) {
  return system.spawn<ExitProofActor<LinkState, NodeAddress, RemoteSecurity, std::string, std::chrono::milliseconds, uint64_t>>(
      worker_link, std::move(node), std::move(security), std::move(head_name), timeout, stop_token);
}

}  // namespace actorlm
