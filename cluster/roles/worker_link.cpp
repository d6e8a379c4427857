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
  std::unique_ptr<TcpGate> gate;  // with a secret: CAF dials the node through it
  RequestSession session;         // seals every forward batch
  caf::actor gateway;
  // Names this link's join in the notice from the functor attached to the
  // gateway's proxy; never leaves the process (cluster/transport/exit_proof_actor.hpp).
  uint64_t gone_token = 0;
  uint64_t stop_token = 0;  // held by the engine
  std::optional<WireMessage> welcome;
  std::string failure;  // why there is no gateway (yet, or any more)
  std::vector<caf::response_promise> waiting;  // join queries before the outcome
  // Forwards the node has not answered: a lost node answers none of them,
  // so the notice that it went fails them.
  std::map<uint64_t, caf::response_promise> in_flight;
  uint64_t next = 0;
  static inline const char* name = "actorlm.worker_link";
};

using Self = caf::stateful_actor<LinkState>;

void answer_waiting(Self* self) {
  for (auto& rp : self->state.waiting) {
    if (self->state.welcome) {
      rp.deliver(*self->state.welcome);
    } else {
      rp.deliver(caf::make_error(caf::sec::runtime_error, self->state.failure));
    }
  }
  self->state.waiting.clear();
}

void lose_node(Self* self, const caf::error& reason) {
  self->state.gateway = caf::actor{};
  self->state.failure = "worker node " + self->state.node.str() + " was lost: " + self->system().render(reason);
  std::fprintf(stderr, "actorlm head: %s\n", self->state.failure.c_str());
  for (auto& [id, rp] : self->state.in_flight) rp.deliver(caf::make_error(caf::sec::runtime_error, self->state.failure));
  self->state.in_flight.clear();
}

caf::behavior worker_link(Self* self, NodeAddress node, RemoteSecurity security, std::string head_name,
                          std::chrono::milliseconds timeout, uint64_t stop_token) {
  self->state.node = node;
  self->state.stop_token = stop_token;
  try {
    self->state.gate = open_dial_gate(node, security);
  } catch (const std::exception& e) {
    self->state.failure = "cannot join " + node.str() + ": " + e.what();
  }
  if (self->state.failure.empty()) {
  join_node(
      self, node, self->state.gate.get(), security.secret, head_name, timeout,
      [self](const caf::actor& gateway, const fb::NodeWelcomeT& w, RequestSession session) {
        self->state.gateway = gateway;
        self->state.session = std::move(session);
        self->state.gone_token = random_token();
        // Runs in this process when CAF loses the connection to the node.
        gateway->attach_functor([link = caf::actor_cast<caf::actor_addr>(self), token = self->state.gone_token](const caf::error& reason) {
          if (auto to = caf::actor_cast<caf::actor>(link)) caf::anon_send(to, node_gone_atom::value, token, reason);
        });
        self->state.welcome = WireMessage{msg::pack(w)};
        answer_waiting(self);
      },
      [self](const std::string& why) {
        self->state.failure = "cannot join " + self->state.node.str() + ": " + why;
        answer_waiting(self);
      });
  }
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
      [self](shutdown_atom, uint64_t token) {
        if (token == self->state.stop_token) self->quit(caf::exit_reason::user_shutdown);
      },
      [self](forward_atom a, const WireMessage& in) -> caf::result<WireMessage> {
        // Only the head's own scheduler drives the node.
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        if (!self->state.gateway) return caf::make_error(caf::sec::runtime_error, self->state.failure);
        const uint64_t id = self->state.next++;
        auto rp = self->make_response_promise();
        self->state.in_flight.emplace(id, rp);
        auto settle = [self, id](auto&& answer) {
          auto it = self->state.in_flight.find(id);
          if (it == self->state.in_flight.end()) return;  // already failed: the node was lost
          it->second.deliver(std::forward<decltype(answer)>(answer));
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
