#include "actors/remote_setup.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <stdexcept>

#include "actors/wire.hpp"

namespace actorlm {

void configure_remote(caf::actor_system_config& cfg, const RemoteSecurity& security) {
  cfg.load<caf::io::middleman>();
  if (security.tls()) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = security.tls_cert;
    cfg.openssl_key = security.tls_key;
    cfg.openssl_cafile = security.tls_ca;
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

caf::io::middleman_actor dialer(caf::actor_system& system) {
  return system.has_openssl_manager() ? system.openssl_manager().actor_handle() : system.middleman().actor_handle();
}

}  // namespace actorlm
