#include "cluster/router_actor.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman_actor.hpp>
#include <cstdio>
#include <map>
#include <set>

#include "actors/exit_proof_actor.hpp"
#include "cluster/remote_setup.hpp"
#include "actors/stream_messages.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

constexpr auto handshake_timeout = std::chrono::milliseconds(10000);
constexpr auto stats_timeout = std::chrono::seconds(10);

struct NodeLink {
  NodeAddress address;
  std::unique_ptr<TcpGate> gate;  // with a secret: CAF dials the node through it
  RequestSession session;    // seals every request to the node; one per join
  caf::actor gateway;        // set while joined
  // Names this join in the notice the functor attached to the gateway's
  // proxy sends when the connection goes: random, never sent anywhere, and
  // new per join, so neither a peer nor a late notice of an earlier join
  // can take a live node out of the rotation.
  uint64_t gone_token = 0;
  // A node whose welcome the head refused (another model) stays joined on
  // its side, so dialling it again would be refused; it is dialled again
  // once this connection goes (the node restarted, perhaps with the model).
  caf::actor refused;
  bool dialling = false;
  std::string error;         // why it is not joined (last failure)
  std::set<uint64_t> requests;  // in flight there, by the head's id
};

struct RouterState {
  ClusterConfig config;
  NodeModel model;
  std::string head_name;
  caf::actor detokenizer;
  std::unique_ptr<PrefixRouter> policy;
  std::vector<NodeLink> nodes;
  std::map<uint64_t, int> placed;  // request id -> node index
  uint64_t stop_token = 0;         // held by the engine that spawned the router
  static inline const char* name = "actorlm.router";
};

using Self = caf::stateful_actor<RouterState>;

void log_node(Self* self, int i, const std::string& what) {
  std::fprintf(stderr, "actorlm head: node %s %s\n", self->state.nodes[static_cast<size_t>(i)].address.str().c_str(),
               what.c_str());
}

void schedule_dial(Self* self, int i) {
  auto delay = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(self->state.config.retry_interval_s));
  self->delayed_send(self, delay, dial_atom::value, static_cast<int32_t>(i));
}

void dial_failed(Self* self, int i, const std::string& why) {
  NodeLink& n = self->state.nodes[static_cast<size_t>(i)];
  n.dialling = false;
  if (why != n.error) log_node(self, i, "cannot join: " + why);
  n.error = why;
  schedule_dial(self, i);
}

// The node's in-flight requests end with `why`; the node leaves the rotation.
void lose_node(Self* self, int i, const std::string& why) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  std::vector<uint64_t> ids(n.requests.begin(), n.requests.end());
  for (uint64_t id : ids) s.placed.erase(id);
  n.requests.clear();
  n.gateway = caf::actor{};
  n.gone_token = 0;
  n.error = why;
  s.policy->set_alive(i, false);
  log_node(self, i, "lost (" + why + "); failing its " + std::to_string(ids.size()) + " request(s)");
  if (!ids.empty()) {
    self->send(s.detokenizer, stream_atom::value,
               WireMessage{error_stream(ids, ErrorKind::unavailable, "worker node " + n.address.str() + " was lost: " + why)});
  }
  schedule_dial(self, i);
}

// Tells the router (node_gone_atom, i, token) when CAF loses the connection
// to `gateway`; returns the token.
uint64_t watch(Self* self, int i, const caf::actor& gateway) {
  const uint64_t token = random_token();
  // The gateway's proxy terminates when CAF loses the connection to the node
  // (closed, or heartbeats missed); only then does this functor, in this
  // process, tell the router. No message from a peer can say the same.
  gateway->attach_functor([router = caf::actor_cast<caf::actor_addr>(self), i, token](const caf::error& reason) {
    if (auto to = caf::actor_cast<caf::actor>(router)) caf::anon_send(to, node_gone_atom::value, static_cast<int32_t>(i), token, reason);
  });
  return token;
}

void joined(Self* self, int i, const caf::actor& gateway, const fb::NodeWelcomeT& w, RequestSession session) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  if (w.role == "worker") return dial_failed(self, i, "a worker node (--role worker) takes a --remote-worker head, not --node");
  NodeModel theirs{w.model_name, w.vocab_size, w.n_layers, w.hidden, w.tokenizer_digest};
  if (std::string bad = model_mismatch(s.model, theirs); !bad.empty()) {
    n.dialling = false;
    if (bad != n.error) log_node(self, i, "cannot join: " + bad);
    n.error = bad;
    n.refused = gateway;
    n.gone_token = watch(self, i, gateway);
    return;
  }
  n.dialling = false;
  n.error.clear();
  n.gateway = gateway;
  n.session = std::move(session);
  n.refused = caf::actor{};
  n.gone_token = watch(self, i, gateway);
  s.policy->set_alive(i, true);
  if (w.kv_tokens > 0) s.policy->set_capacity(i, w.kv_tokens);
  log_node(self, i, "joined (" + w.device + ", " + std::to_string(w.kv_tokens) + " KV tokens)");
}

void dial(Self* self, int i) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  if (n.gateway || n.dialling || n.refused) return;
  n.dialling = true;
  if (!n.gate) {
    try {
      n.gate = open_dial_gate(n.address, s.config.security);
    } catch (const std::exception& e) {
      return dial_failed(self, i, e.what());
    }
  }
  join_node(
      self, n.address, n.gate.get(), s.config.security.secret, s.head_name, handshake_timeout,
      [self, i](const caf::actor& gateway, const fb::NodeWelcomeT& w, RequestSession session) {
        joined(self, i, gateway, w, std::move(session));
      },
      [self, i](const std::string& why) { dial_failed(self, i, why); });
}

void on_generate(Self* self, const WireMessage& in) {
  auto& s = self->state;
  auto req = msg::open<fb::TokenizedRequest>(in.bytes);
  if (!req) return;  // the local tokenizer built it; cannot happen short of memory corruption
  const uint64_t id = req.message->request_id();
  std::vector<int32_t> ids;
  if (req.message->input_ids()) ids.assign(req.message->input_ids()->begin(), req.message->input_ids()->end());
  RouteDecision d = s.policy->route(ids);
  if (d.node < 0) {
    std::string why = "no worker node is available";
    for (const auto& n : s.nodes) why += "; " + n.address.str() + ": " + (n.error.empty() ? "joining" : n.error);
    self->send(s.detokenizer, stream_atom::value, WireMessage{error_stream({id}, ErrorKind::unavailable, why)});
    return;
  }
  NodeLink& n = s.nodes[static_cast<size_t>(d.node)];
  s.placed[id] = d.node;
  n.requests.insert(id);
  self->send(n.gateway, generate_atom::value, WireMessage{n.session.seal(RequestKind::generate, in.bytes)});
}

template <class Atom>
void on_cancel(Self* self, Atom atom, const WireMessage& in) {
  auto& s = self->state;
  auto a = msg::unpack<fb::Abort>(in.bytes, nullptr);
  if (!a) return;
  std::map<int, fb::AbortT> per_node;
  for (uint64_t id : a->request_ids) {
    auto it = s.placed.find(id);
    if (it == s.placed.end()) continue;
    per_node[it->second].request_ids.push_back(id);
    per_node[it->second].reason = a->reason;
  }
  constexpr RequestKind kind = std::is_same_v<Atom, abort_atom> ? RequestKind::abort : RequestKind::stop;
  for (auto& [i, abort] : per_node) {
    NodeLink& n = s.nodes[static_cast<size_t>(i)];
    if (n.gateway) self->send(n.gateway, atom, WireMessage{n.session.seal(kind, msg::pack(abort))});
  }
}

// The node's in-flight requests end with `why`, and the node is told to
// abort them, so their KV is freed there.
void fail_requests(Self* self, int i, const std::string& why) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  std::vector<uint64_t> ids(n.requests.begin(), n.requests.end());
  if (ids.empty()) return;
  for (uint64_t id : ids) {
    s.placed.erase(id);
    s.policy->finished(i);
  }
  n.requests.clear();
  fb::AbortT abort;
  abort.request_ids = ids;
  abort.reason = why;
  if (n.gateway) self->send(n.gateway, abort_atom::value, WireMessage{n.session.seal(RequestKind::abort, msg::pack(abort))});
  self->send(s.detokenizer, stream_atom::value,
             WireMessage{error_stream(ids, ErrorKind::unavailable, "worker node " + n.address.str() + " " + why)});
}

// A node's TokenStream, passed on holding only the items for requests routed
// to that node: a node cannot write into another node's requests. Which node
// sent it is what CAF names as the sender.
void on_stream(Self* self, const WireMessage& in) {
  auto& s = self->state;
  const caf::actor_addr from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  int node = -1;
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    if (s.nodes[i].gateway && s.nodes[i].gateway.address() == from) node = static_cast<int>(i);
  }
  if (node < 0) return;  // a node we no longer route to; its requests have already ended
  std::string error;
  auto ts = msg::unpack<fb::TokenStream>(in.bytes, &error);
  if (!ts) {
    // Which requests it carried is unknown, and a stream that lost a step
    // cannot be repaired: every request there ends, and the node frees them.
    log_node(self, node, "sent an unreadable token stream: " + error);
    fail_requests(self, node, "sent an unreadable token stream");
    return;
  }
  NodeLink& n = s.nodes[static_cast<size_t>(node)];
  fb::TokenStreamT kept;
  size_t foreign = 0;
  for (auto& item : ts->items) {
    if (!n.requests.count(item->request_id)) {
      ++foreign;
      continue;
    }
    if (item->finish_reason != fb::FinishReason::None) {
      n.requests.erase(item->request_id);
      s.placed.erase(item->request_id);
      s.policy->finished(node);
    }
    kept.items.push_back(std::move(item));
  }
  if (foreign > 0) log_node(self, node, "sent " + std::to_string(foreign) + " token stream item(s) for requests not routed there (dropped)");
  if (kept.items.empty()) return;
  self->send(s.detokenizer, stream_atom::value, foreign == 0 ? in : WireMessage{msg::pack(kept)});
}

// Sums the alive nodes' EngineStats and lists every node.
struct StatsGather {
  caf::response_promise promise;
  fb::EngineStatsT total;
  size_t pending = 0;
};

void finish_stats(Self* self, const std::shared_ptr<StatsGather>& g) {
  auto& s = self->state;
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const auto& r = s.policy->stats(static_cast<int>(i));
    auto& ns = g->total.nodes[i];
    ns->address = s.nodes[i].address.str();
    ns->alive = static_cast<bool>(s.nodes[i].gateway);
    ns->routed_total = r.routed;
    ns->in_flight = static_cast<int32_t>(s.nodes[i].requests.size());
    if (!ns->alive) ns->error = s.nodes[i].error.empty() ? "joining" : s.nodes[i].error;
  }
  auto& t = g->total;
  t.cache_hit_rate = t.prompt_tokens_total ? double(t.cached_tokens_total) / double(t.prompt_tokens_total) : 0.0;
  g->promise.deliver(WireMessage{msg::pack(t)});
}

void add_node_stats(fb::EngineStatsT& t, fb::NodeStatsT& ns, const fb::EngineStatsT& st) {
  t.running += st.running;
  t.waiting += st.waiting;
  t.finished_total += st.finished_total;
  t.prompt_tokens_total += st.prompt_tokens_total;
  t.cached_tokens_total += st.cached_tokens_total;
  t.generated_tokens_total += st.generated_tokens_total;
  t.prefill_steps_total += st.prefill_steps_total;
  t.decode_steps_total += st.decode_steps_total;
  t.pool_capacity_tokens += st.pool_capacity_tokens;
  t.pool_free_tokens += st.pool_free_tokens;
  t.evictable_tokens += st.evictable_tokens;
  t.protected_tokens += st.protected_tokens;
  t.free_req_slots += st.free_req_slots;
  if (!st.invariant_error.empty() && t.invariant_error.empty()) t.invariant_error = st.invariant_error;
  ns.running = st.running;
  ns.waiting = st.waiting;
  ns.cache_hit_rate = st.cache_hit_rate;
  ns.prompt_tokens_total = st.prompt_tokens_total;
  ns.cached_tokens_total = st.cached_tokens_total;
  ns.pool_capacity_tokens = st.pool_capacity_tokens;
  ns.pool_free_tokens = st.pool_free_tokens;
  ns.protected_tokens = st.protected_tokens;
}

caf::result<WireMessage> on_stats(Self* self, const WireMessage& in) {
  auto& s = self->state;
  auto g = std::make_shared<StatsGather>();
  g->promise = self->make_response_promise();
  for (size_t i = 0; i < s.nodes.size(); ++i) g->total.nodes.push_back(std::make_unique<fb::NodeStatsT>());
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    if (!s.nodes[i].gateway) continue;
    ++g->pending;
    self->request(s.nodes[i].gateway, stats_timeout, stats_atom::value,
                  WireMessage{s.nodes[i].session.seal(RequestKind::stats, in.bytes)})
        .then(
            [self, g, i](const WireMessage& reply) {
              auto st = msg::unpack<fb::EngineStats>(reply.bytes, nullptr);
              if (st) add_node_stats(g->total, *g->total.nodes[i], *st);
              if (--g->pending == 0) finish_stats(self, g);
            },
            [self, g, i](const caf::error& e) {
              g->total.nodes[i]->error = "stats: " + self->system().render(e);
              if (--g->pending == 0) finish_stats(self, g);
            });
  }
  if (g->pending == 0) finish_stats(self, g);
  return g->promise;
}

caf::result<int64_t> on_flush(Self* self) {
  auto& s = self->state;
  auto promise = self->make_response_promise<int64_t>();
  auto sum = std::make_shared<std::pair<int64_t, size_t>>(0, 0);
  for (const auto& n : s.nodes) sum->second += n.gateway ? 1 : 0;
  if (sum->second == 0) {
    promise.deliver(int64_t{0});
    return promise;
  }
  for (auto& n : s.nodes) {
    if (!n.gateway) continue;
    self->request(n.gateway, stats_timeout, flush_atom::value, WireMessage{n.session.seal(RequestKind::flush, {})})
        .then(
            [promise, sum](int64_t freed) mutable {
              sum->first += freed;
              if (--sum->second == 0) promise.deliver(sum->first);
            },
            [promise, sum](const caf::error&) mutable {
              if (--sum->second == 0) promise.deliver(sum->first);
            });
  }
  return promise;
}

// Orders to the router come from this process only: nodes hold its handle
// (they stream to it), so without this check a node could route requests or
// stop the head.
bool from_this_process(Self* self) {
  const auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

caf::behavior router(Self* self, ClusterConfig config, NodeModel model, caf::actor detokenizer, std::string head_name,
                     uint64_t stop_token) {
  auto& s = self->state;
  s.config = std::move(config);
  s.model = std::move(model);
  s.detokenizer = std::move(detokenizer);
  s.head_name = std::move(head_name);
  s.stop_token = stop_token;
  s.policy = std::make_unique<PrefixRouter>(static_cast<int>(s.config.nodes.size()), s.config.routing);
  for (size_t i = 0; i < s.config.nodes.size(); ++i) {
    s.nodes.push_back(NodeLink{s.config.nodes[i], nullptr, {}, {}, 0, {}, false, "", {}});
    s.policy->set_alive(static_cast<int>(i), false);
  }
  for (size_t i = 0; i < s.nodes.size(); ++i) dial(self, static_cast<int>(i));
  return {
      [self](generate_atom, const WireMessage& in, const caf::actor&) {
        if (from_this_process(self)) on_generate(self, in);
      },
      [self](abort_atom a, const WireMessage& in) {
        if (from_this_process(self)) on_cancel(self, a, in);
      },
      [self](stop_atom a, const WireMessage& in) {
        if (from_this_process(self)) on_cancel(self, a, in);
      },
      [self](stream_atom, const WireMessage& in) { on_stream(self, in); },
      [self](stats_atom, const WireMessage& in) -> caf::result<WireMessage> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        return on_stats(self, in);
      },
      [self](flush_atom) -> caf::result<int64_t> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        return on_flush(self);
      },
      [self](dial_atom, int32_t i) {
        if (from_this_process(self) && i >= 0 && static_cast<size_t>(i) < self->state.nodes.size()) dial(self, i);
      },
      [self](node_gone_atom, int32_t i, uint64_t token, const caf::error& reason) {
        auto& nodes = self->state.nodes;
        if (i < 0 || static_cast<size_t>(i) >= nodes.size()) return;
        NodeLink& n = nodes[static_cast<size_t>(i)];
        if (token == 0 || token != n.gone_token) return;
        if (n.gateway) {
          lose_node(self, i, self->system().render(reason));
        } else if (n.refused) {
          n.refused = caf::actor{};
          n.gone_token = 0;
          schedule_dial(self, i);
        }
      },
      [self](status_atom) {
        int32_t up = 0;
        std::string errors;
        for (const auto& n : self->state.nodes) {
          if (n.gateway) {
            ++up;
          } else if (!n.error.empty()) {
            errors += (errors.empty() ? "" : "; ") + n.address.str() + ": " + n.error;
          }
        }
        return caf::make_message(up, static_cast<int32_t>(self->state.nodes.size()), errors);
      },
      [self](shutdown_atom, uint64_t token) {
        if (token == self->state.stop_token) self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_router(caf::actor_system& system, ClusterConfig config, NodeModel model, caf::actor detokenizer,
                        std::string head_name, uint64_t stop_token) {
  return system.spawn<ExitProofActor<RouterState, ClusterConfig, NodeModel, caf::actor, std::string, uint64_t>>(
      router, std::move(config), std::move(model), std::move(detokenizer), std::move(head_name), stop_token);
}

}  // namespace actorlm
