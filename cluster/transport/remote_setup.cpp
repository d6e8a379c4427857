#include "cluster/transport/remote_setup.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <atomic>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "actors/wire.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "cluster/transport/tls_error_queue.hpp"

namespace actorlm {

void configure_remote(caf::actor_system_config& cfg, const RemoteSecurity& security) {
  cfg.load<caf::io::middleman>();
  if (security.tls()) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = security.tls_cert;
    cfg.openssl_key = security.tls_key;
    cfg.openssl_cafile = security.tls_ca;
    if (!tls_error_queue_cleared()) {
      std::fprintf(stderr,
                   "actorlm: warning: OpenSSL's error queue is not cleared before CAF's TLS calls in this process "
                   "(its executable does not export actorlm's SSL_read and friends), so one failed TLS handshake "
                   "can close every TLS link (cluster/transport/tls_error_queue.hpp)\n");
    }
  }
  cfg.add_message_type<WireMessage>("actorlm.WireMessage");
  // CAF only notices a closed connection by default; heartbeats also catch a
  // peer whose machine or network went away without a FIN.
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(500)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(4)});
}

uint16_t publish_actor(caf::actor_system& system, const caf::actor& actor, const std::string& host, uint16_t port) {
  caf::expected<uint16_t> bound = system.has_openssl_manager()
                                      ? caf::openssl::publish(actor, port, host.c_str(), true)
                                      : system.middleman().publish(actor, port, host.c_str(), true);
  if (!bound) throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + system.render(bound.error()));
  return *bound;
}

std::unique_ptr<TcpGate> open_dial_gate(const NodeAddress& node, const RemoteSecurity& security) {
  if (security.secret.empty()) return nullptr;
  GateConfig g;
  g.side = GateSide::dialer;
  g.secret = security.secret;
  g.target_host = node.host;
  g.target_port = node.port;
  g.max_frame_payload = security.tls() ? 0 : security.max_message_bytes;
  g.label = "head gate to " + node.str();
  return std::make_unique<TcpGate>(std::move(g));
}

void join_node(caf::event_based_actor* self, const NodeAddress& node, const TcpGate* gate, const std::string& secret,
               const std::string& head_name, std::chrono::milliseconds timeout, JoinedHandler joined,
               FailedHandler failed) {
  // CAF only sees the gate's side; the gate knows why the node refused.
  auto fail = [self, failed, gate](const caf::error& e) {
    std::string why = gate ? gate->last_failure() : "";
    failed(why.empty() ? self->system().render(e) : why);
  };
  const std::string host = gate ? "127.0.0.1" : node.host;
  const uint16_t port = gate ? gate->port() : node.port;
  self->request(dialer(self->system()), timeout, caf::connect_atom::value, host, port)
      .then(
          [=](const caf::node_id&, const caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (!ptr) return failed("nothing is published on that port");
            auto gateway = caf::actor_cast<caf::actor>(ptr);
            // The middleman answers a connect to a host and port it knows from
            // its cache, and forgets the entry only when its own down message
            // for the proxy arrives: a dial made at once after a node was lost
            // can get the dead proxy back. A request to a dead proxy is dropped
            // without an error, so the handshake would wait out `timeout`.
            // Attaching to a terminated actor runs the functor at once.
            auto gone = std::make_shared<std::atomic<bool>>(false);
            gateway->attach_functor([gone](const caf::error&) { gone->store(true); });
            if (gone->load()) return failed("the middleman handed back the connection that was just lost");
            fb::NodeHelloT hello;
            hello.protocol = cluster_protocol;
            hello.head_name = head_name;
            self->request(gateway, timeout, hello_atom::value, WireMessage{msg::pack(hello)})
                .then(
                    [=](const WireMessage& reply) {
                      auto challenge = msg::unpack<fb::NodeChallenge>(reply.bytes, nullptr);
                      if (!challenge) {
                        auto refused = msg::unpack<fb::NodeWelcome>(reply.bytes, nullptr);
                        return failed(refused ? refused->error : "unreadable challenge");
                      }
                      fb::NodeJoinT join;
                      join.nonce = challenge->nonce;
                      join.proof = join_proof(secret, challenge->nonce);
                      join.head_name = head_name;
                      join.head_nonce = make_nonce();
                      auto key = session_key(secret, join.nonce, join.head_nonce);
                      self->request(gateway, timeout, join_atom::value, WireMessage{msg::pack(join)})
                          .then(
                              [=](const WireMessage& reply) mutable {
                                std::string error;
                                auto w = msg::unpack<fb::NodeWelcome>(reply.bytes, &error);
                                if (!w) return failed("unreadable welcome: " + error);
                                if (!w->accepted) return failed(w->error);
                                joined(gateway, *w, RequestSession(std::move(key)));
                              },
                              fail);
                    },
                    fail);
          },
          fail);
}

caf::io::middleman_actor dialer(caf::actor_system& system) {
  return system.has_openssl_manager() ? system.openssl_manager().actor_handle() : system.middleman().actor_handle();
}

}  // namespace actorlm
