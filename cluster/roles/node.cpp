#include "cluster/roles/node.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/engine_core.hpp"
#include "actors/wire.hpp"
#include "cluster/roles/node_gateway.hpp"
#include "cluster/transfer/kv_sender.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "messages/envelope.hpp"
#include "model/model_fingerprint.hpp"

namespace actorlm {

struct Node::Impl {
  caf::actor_system& system;
  caf::actor gateway;
  uint64_t gateway_stop_token = 0;  // the gateway stops on this and on nothing a peer can send
  std::unique_ptr<TcpGate> gate;   // with a secret: the public port; the middleman listens behind it
  uint16_t middleman_port = 0;
  caf::actor kv_sender;            // an engine node's: its held requests' KV out (PD, migration)
  uint64_t kv_sender_stop = 0;
  std::optional<EngineCore> core;  // an engine node
  caf::actor worker;               // a worker node
  std::string device;
  int64_t kv_tokens = 0;
  uint16_t port = 0;
  std::shared_ptr<KvDecodeShared> decode;     // an engine node's with a data port: KV in
  std::unique_ptr<KvDataServer> data_server;
};

Node::Node(caf::actor_system& system, NodeConfig config)
    : impl_(std::make_unique<Impl>(Impl{system, {}, 0, nullptr, 0, {}, 0, {}, {}, {}, 0, 0, {}, {}})) {
  auto& m = *impl_;
  if (!system.has_middleman()) throw std::invalid_argument("a node needs the middleman: call configure_remote() first");
  if (config.security.tls() && !system.has_openssl_manager()) {
    throw std::invalid_argument("TLS is configured but the actor system has no OpenSSL module (configure_remote())");
  }
  if (std::string bad = config.security.check(config.host); !bad.empty()) throw std::invalid_argument(bad);
  if (config.role != "engine" && config.role != "worker") throw std::invalid_argument("node role must be engine or worker");
  const std::string& mode = config.disaggregation_mode;
  if (!mode.empty() && mode != "prefill" && mode != "decode") {
    throw std::invalid_argument("disaggregation mode must be prefill or decode");
  }
  if (!mode.empty() && config.role != "engine") throw std::invalid_argument("a worker node takes no disaggregation mode");
  auto tok = load_tokenizer(config.engine.model_path);
  for (uint8_t b : make_nonce()) m.gateway_stop_token = (m.gateway_stop_token << 8) | b;
  // A data plane needs a session key no one outside the join knows: a
  // secret's (the key is an HMAC under it), or TLS's (the join's nonces, from
  // which the key is derived, travel only inside the mutually authenticated
  // TLS connection). A plain cluster has neither, so its KV stays on the
  // middleman.
  const bool data_plane = (!config.security.secret.empty() || config.security.tls()) && config.kv_data_port >= 0;
  const DataProtection protection = config.kv_trusted_fabric ? DataProtection::trusted_fabric : DataProtection::sealed;
  // Every engine node takes KV in (a decode node from prefill nodes, any
  // node a request migrating to it) and sends it out.
  if (config.role == "engine" && data_plane) {
    m.decode = std::make_shared<KvDecodeShared>();
    m.decode->sessions = std::make_shared<DataSessions>();
  }
  // Checked before anything starts: a folder that is not one is a usage error.
  AdapterDir lora_dir = config.lora_dir.empty() ? AdapterDir() : AdapterDir(config.lora_dir);
  m.gateway = spawn_node_gateway(system, config.security.secret, m.gateway_stop_token, m.decode, std::move(lora_dir),
                                 config.engine.max_lora_bytes);
  caf::actor target;
  fb::NodeWelcomeT w;
  ModelConfig model;
  std::vector<AdapterInfo> adapters;  // --lora, as loaded
  if (config.role == "worker") {
    WorkerCore core = spawn_worker_core(system, config.engine, *tok);
    adapters = core.adapters;
    m.worker = target = core.worker;
    model = core.model;
    m.device = core.device;
    m.kv_tokens = core.kv.capacity_tokens;
    w.max_context = core.kv.max_context_len;
    w.page_size = core.kv.page_size;
    w.max_requests = core.kv.max_requests;
  } else {
    m.core = spawn_engine_core(system, config.engine, *tok, m.gateway);
    adapters = m.core->adapters;
    target = m.core->scheduler;
    model = m.core->model;
    m.device = m.core->device;
    m.kv_tokens = m.core->kv_tokens;
    w.max_context = m.core->max_context;
    w.page_size = config.engine.page_size;
    w.max_requests = config.engine.max_requests;
  }
  NodeModel described = describe_model(config.engine.model_path, model, *tok);
  caf::actor kv_worker;
  if (m.core) {
    kv_worker = m.core->worker;
    w.kv_dtype = m.core->kv_dtype;
    w.kv_token_bytes = m.core->kv_token_bytes;
    w.disaggregation_mode = mode;
    if (!mode.empty() && w.kv_token_bytes <= 0) {
      stop_engine_core(*m.core);
      caf::anon_send(m.gateway, shutdown_atom::value, m.gateway_stop_token);
      throw std::invalid_argument("--disaggregation-mode needs KV transfers, which the " + m.device +
                                  " backend does not do yet");
    }
  }
  w.accepted = true;
  w.role = config.role;
  w.model_name = described.name;
  w.vocab_size = described.vocab_size;
  w.n_layers = described.n_layers;
  w.hidden = described.hidden;
  w.tokenizer_digest = described.tokenizer_digest;
  w.kv_tokens = m.kv_tokens;
  w.device = m.device;
  for (const AdapterInfo& a : adapters) {
    auto na = std::make_unique<fb::NodeAdapterT>();
    na->name = a.name;
    na->id = a.id;
    na->fingerprint = model_fingerprint(a.path);
    w.adapters.push_back(std::move(na));
  }
  if (m.decode && w.kv_token_bytes > 0) {
    m.decode->receiver =
        std::make_shared<KvReceiver>(KvLayout{kv_model_digest(described), w.kv_dtype, described.n_layers, w.kv_token_bytes});
    KvDataServerConfig d;
    d.host = config.host;
    d.port = static_cast<uint16_t>(config.kv_data_port);
    d.protection = protection;
    d.transport = config.kv_transport;
    d.worker = kv_worker;
    if (!config.kv_through_worker) d.spans = m.core->kv_spans;
    d.receiver = m.decode->receiver;
    d.sessions = m.decode->sessions;
    d.gateway = m.gateway;
    m.data_server = std::make_unique<KvDataServer>(system, std::move(d));
    w.kv_data_port = m.data_server->port();
  }
  if (config.security.secret.empty()) {
    m.port = m.middleman_port = publish_actor(system, m.gateway, config.host, config.port);
  } else {
    // The middleman takes only what the gate let through: it listens on
    // loopback, and the public port is the gate's (cluster/transport/tcp_gate.hpp).
    m.middleman_port = publish_actor(system, m.gateway, "127.0.0.1", 0);
    GateConfig g;
    g.side = GateSide::acceptor;
    g.secret = config.security.secret;
    g.listen_host = config.host;
    g.listen_port = config.port;
    g.target_host = "127.0.0.1";
    g.target_port = m.middleman_port;
    g.max_frame_payload = config.security.tls() ? 0 : config.security.max_message_bytes;
    g.label = "node gate";
    m.gate = std::make_unique<TcpGate>(std::move(g));
    m.port = m.gate->port();
  }
  // From an actor of this process: the gateway takes its scheduler (or
  // worker) from no one else. Heads that join before this are told the node
  // is starting.
  caf::scoped_actor self{system};
  const std::string label = "node " + config.host + ":" + std::to_string(m.port);
  if (m.core && w.kv_token_bytes > 0) {
    KvSenderConfig kc;
    kc.layout = KvLayout{kv_model_digest(described), w.kv_dtype, described.n_layers, w.kv_token_bytes};
    kc.model = described;
    kc.security = config.security;
    kc.worker = kv_worker;
    if (!config.kv_through_worker) kc.spans = m.core->kv_spans;
    kc.clock = m.core->kv_clock;
    kc.corrupt_chunk = config.corrupt_kv_chunk;
    kc.pause_per_chunk = std::chrono::milliseconds(config.kv_send_pause_ms);
    kc.data_plane = data_plane;
    kc.data_protection = protection;
    kc.data_transport = config.kv_transport;
    kc.stream = config.kv_stream;
    kc.keep_connections = !config.kv_fresh_connections;
    kc.name = label;
    m.kv_sender_stop = random_token();
    m.kv_sender = spawn_kv_sender(system, std::move(kc), m.kv_sender_stop);
  }
  std::vector<int64_t> adapter_bytes;
  for (const AdapterInfo& a : adapters) adapter_bytes.push_back(a.bytes);
  self->send(m.gateway, attach_atom::value, target, kv_worker, m.kv_sender, WireMessage{msg::pack(w)}, label,
             config.kv_stream, adapter_bytes);
}

Node::~Node() {
  auto& m = *impl_;
  m.data_server.reset();  // its connections end before the worker they write through
  m.gate.reset();
  if (m.middleman_port) (void)m.system.middleman().unpublish(m.gateway, m.middleman_port);
  if (m.core) stop_engine_core(*m.core);
  if (m.worker) caf::anon_send_exit(m.worker, caf::exit_reason::user_shutdown);
  if (m.kv_sender) caf::anon_send(m.kv_sender, shutdown_atom::value, m.kv_sender_stop);
  caf::anon_send(m.gateway, shutdown_atom::value, m.gateway_stop_token);
}

uint16_t Node::port() const { return impl_->port; }
uint16_t Node::middleman_port() const { return impl_->middleman_port; }
const std::string& Node::device() const { return impl_->device; }
int64_t Node::kv_tokens() const { return impl_->kv_tokens; }
caf::actor Node::gateway() const { return impl_->gateway; }

void Node::leave() {
  caf::scoped_actor self{impl_->system};
  self->request(impl_->gateway, std::chrono::seconds(15), leaving_atom::value).receive([](bool) {}, [](const caf::error&) {});
}

int32_t Node::in_flight() {
  caf::scoped_actor self{impl_->system};
  int32_t n = -1;
  self->request(impl_->gateway, std::chrono::seconds(5), status_atom::value)
      .receive([&](int32_t routes) { n = routes; }, [](const caf::error&) {});
  return n;
}

}  // namespace actorlm
