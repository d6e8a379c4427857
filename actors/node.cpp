#include "actors/node.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/cluster_handshake.hpp"
#include "actors/engine_core.hpp"
#include "actors/node_gateway.hpp"
#include "actors/remote_setup.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"

namespace actorlm {

struct Node::Impl {
  caf::actor_system& system;
  caf::actor gateway;
  std::optional<EngineCore> core;
  uint16_t port = 0;
};

Node::Node(caf::actor_system& system, NodeConfig config) : impl_(std::make_unique<Impl>(Impl{system, {}, {}, 0})) {
  auto& m = *impl_;
  if (!system.has_middleman()) throw std::invalid_argument("a node needs the middleman: call configure_remote() first");
  if (config.security.tls() && !system.has_openssl_manager()) {
    throw std::invalid_argument("TLS is configured but the actor system has no OpenSSL module (configure_remote())");
  }
  if (std::string bad = config.security.check(config.host); !bad.empty()) throw std::invalid_argument(bad);
  auto tok = load_tokenizer(config.engine.model_path);
  m.gateway = spawn_node_gateway(system, config.security.secret);
  m.core = spawn_engine_core(system, config.engine, *tok, m.gateway);
  NodeModel model = describe_model(config.engine.model_path, m.core->model, *tok);
  fb::NodeWelcomeT w;
  w.accepted = true;
  w.model_name = model.name;
  w.vocab_size = model.vocab_size;
  w.n_layers = model.n_layers;
  w.hidden = model.hidden;
  w.tokenizer_digest = model.tokenizer_digest;
  w.kv_tokens = m.core->kv_tokens;
  w.max_context = m.core->max_context;
  w.device = m.core->device;
  m.port = publish_actor(system, m.gateway, config.host, config.port);
  // From an actor of this process: the gateway takes its scheduler from no
  // one else. Heads that join before this are told the node is starting.
  caf::scoped_actor self{system};
  self->send(m.gateway, attach_atom::value, m.core->scheduler, WireMessage{msg::pack(w)},
             "node " + config.host + ":" + std::to_string(m.port));
}

Node::~Node() {
  auto& m = *impl_;
  if (m.port) (void)m.system.middleman().unpublish(m.gateway, m.port);
  if (m.core) stop_engine_core(*m.core);
  caf::anon_send_exit(m.gateway, caf::exit_reason::user_shutdown);
}

uint16_t Node::port() const { return impl_->port; }
const std::string& Node::device() const { return impl_->core->device; }
int64_t Node::kv_tokens() const { return impl_->core->kv_tokens; }
caf::actor Node::gateway() const { return impl_->gateway; }

}  // namespace actorlm
