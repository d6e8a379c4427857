#pragma once
// CAF's side of a cluster: the actor system modules and settings a head or
// node needs (middleman, OpenSSL when TLS is on, heartbeats that notice a
// silent peer, the WireMessage type), publishing a node, and the middleman
// actor a head dials through.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman_actor.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "cluster/transport/remote_security.hpp"
#include "cluster/transport/request_session.hpp"
#include "cluster/transport/tcp_gate.hpp"
#include "messages/envelope.hpp"

namespace actorlm {

// Call before constructing the actor_system. Loads the middleman (and the
// OpenSSL manager with certificate, key and CA when security.tls()), and
// sets heartbeats so that a peer that vanishes without closing its
// connection is dropped within a few seconds.
void configure_remote(caf::actor_system_config& cfg, const RemoteSecurity& security);

// Publishes `actor` on host:port (port 0: any free port) with TLS when the
// system has the OpenSSL module. Returns the bound port; throws
// std::runtime_error saying why it could not.
uint16_t publish_actor(caf::actor_system& system, const caf::actor& actor, const std::string& host, uint16_t port);

// A head's local gate to one node (cluster/transport/tcp_gate.hpp): CAF dials its
// loopback port, and it authenticates the connection to the node's gate with
// the shared secret. Null when there is no secret (TLS alone: no gate). The
// caller owns it for as long as it uses the node.
std::unique_ptr<TcpGate> open_dial_gate(const NodeAddress& node, const RemoteSecurity& security);

// Dials a node (through `gate` when not null) and joins it on behalf of
// `self` (connect, hello, challenge, join; each step within `timeout`):
// `joined` gets the node's gateway, its welcome and the session that must
// seal every request to it, or `failed` why not (unreachable, refused, timed
// out). `self` is the head's actor the node will know, so it must live as
// long as the head uses the node.
using JoinedHandler = std::function<void(const caf::actor& gateway, const fb::NodeWelcomeT& welcome, RequestSession session)>;
using FailedHandler = std::function<void(const std::string& why)>;
void join_node(caf::event_based_actor* self, const NodeAddress& node, const TcpGate* gate, const std::string& secret,
               const std::string& head_name, std::chrono::milliseconds timeout, JoinedHandler joined,
               FailedHandler failed);

// The middleman actor to send (connect_atom, host, port) to: OpenSSL's when
// the system has it, so that a TLS system never dials in the clear.
caf::io::middleman_actor dialer(caf::actor_system& system);

}  // namespace actorlm
