#include "cluster/roles/router_actor.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman_actor.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "actors/engine_stats.hpp"
#include "actors/stream_messages.hpp"
#include "actors/wire.hpp"
#include "cluster/roles/node_adapters.hpp"
#include "cluster/roles/rebalancer.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/exit_proof_actor.hpp"
#include "actors/local_sender.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "messages/envelope.hpp"
#include "scheduler/request.hpp"

namespace actorlm {
namespace {

constexpr auto handshake_timeout = std::chrono::milliseconds(10000);
constexpr auto stats_timeout = std::chrono::seconds(10);
// A node's worker reads an adapter file between two steps: a big file and
// a long step take a while.
constexpr auto adapter_timeout = std::chrono::minutes(10);
constexpr auto reserve_timeout = std::chrono::seconds(30);
// A decode node with no room now is asked again after this long.
constexpr auto reserve_retry = std::chrono::milliseconds(20);
// Attempts of a disaggregated request that nodes still up refuse (a
// transfer refused) before it fails; a lost node is a move instead, within
// --failover-attempts (retry_pd).
constexpr int max_pd_attempts = 3;
// Disaggregated attempts' ids on the nodes, far above the tokenizer's.
constexpr uint64_t first_wire_id = 1ull << 62;

// Asks a decode node again for a request's reservation (from the router itself).
using pd_reserve_atom = caf::atom_constant<caf::atom("pdreserve")>;
// Tries again to place the requests waiting for a node (from the router itself).
using failover_retry_atom = caf::atom_constant<caf::atom("failretry")>;
// Moves the next requests off a draining node (from the router itself).
using drain_tick_atom = caf::atom_constant<caf::atom("draintick")>;
// A draining node is looked at again after this long (requests still
// prefilling there, moves that failed).
constexpr auto drain_interval = std::chrono::milliseconds(100);
// Looks for a request to move from a busy node to an idle one
// (cluster/roles/rebalancer.hpp; from the router itself).
using rebalance_tick_atom = caf::atom_constant<caf::atom("rebaltick")>;
// Moves under way from one node at once: each holds its request's rows on
// two nodes and the data plane's bandwidth.
constexpr size_t max_moves_per_node = 4;
// From a kv_move order to its answer: the whole copy of one request's KV.
constexpr auto move_timeout = std::chrono::seconds(120);

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
  std::set<uint64_t> requests;  // in flight there, by the head's id (a disaggregated one by its wire id)
  std::string mode;          // NodeWelcome::disaggregation_mode: "", "prefill" or "decode"
  int64_t kv_tokens = 0;
  int64_t kv_token_bytes = 0;  // one token's KV over all layers / n_layers (NodeWelcome)
  // Drained (POST /nodes/{id}/drain, or the node said it is leaving): no
  // new request goes there, and its running ones move elsewhere with their
  // KV. Cleared when it joins again (a restart).
  bool draining = false;
  bool drain_scheduled = false;  // a drain_tick_atom is on its way
  // Its LoRA adapters as it last said: its welcome's, then its AdapterNews.
  // (Changes made through this head are not written here: only a node's
  // word on changes made through other heads is read from it.)
  std::vector<NodeAdapter> adapters{};
};

// A request split over a prefill node (its prompt) and a decode node (the
// rest). The nodes know it by a wire id of its own, new for each attempt, so
// that a late answer about an abandoned attempt is never taken for the
// current one.
struct PdRequest {
  std::vector<uint8_t> bytes;  // the TokenizedRequest, for retries
  uint64_t wire = 0;
  int prefill = -1, decode = -1;  // where this attempt is; -1: done there, or not placed
  bool streamed = false;          // the decode node has sent tokens: past retrying as a pair
  std::vector<int32_t> tokens;    // what it sent, to go on from if it is lost
  int attempts = 0;
  int refused = 0;                // attempts that failed with their nodes still up
  int moves = 0;                  // failovers, this pair's lost nodes included
  bool ending = false;            // the client aborted or stopped it while it decoded
};

// A request on one node, with what the head needs to go on with it on
// another if that node is lost: the request as first sent (seeded by the
// head) and every token its client has been sent.
struct Placement {
  int node = -1;
  std::vector<uint8_t> bytes;     // the TokenizedRequest
  std::vector<int32_t> streamed;  // tokens passed on to the client
  int moves = 0;                  // failovers so far
  bool ending = false;            // the client aborted or stopped it: it does not move
  // Lost its node while no other could take it: it waits for one until then.
  std::chrono::steady_clock::time_point waits_until{};
};

// A running request on its way to another node with its KV (live
// migration, a drain). The node it is on holds it frozen; the target has
// rows reserved for it and gets them from that node's KV sender; the commit
// starts it there from its last token. Items the target sends before the
// source has said the copy is done are kept back here, so that a failed
// move (the source goes on) never shows the client a token twice.
struct Move {
  int from = -1, to = -1;
  int wanted = -1;       // a rebalance's target: this node or none
  uint64_t from_id = 0;  // its id on the source: the head's, or a pair's wire id
  uint64_t token = 0;    // this move's, so that late answers of another are told apart
  bool adopted = false;  // the policy counted it on `to` (in_flight)
  bool target_lost = false;
  int64_t rows = 0;      // KV rows sent (after the target's own cached prefix)
  std::chrono::steady_clock::time_point started;
  std::vector<std::unique_ptr<fb::TokenStreamItemT>> kept;  // from `to`, not yet passed on
};

struct RouterState {
  ClusterConfig config;
  NodeModel model;
  std::string head_name;
  caf::actor detokenizer;
  std::unique_ptr<PrefixRouter> policy;
  std::vector<NodeLink> nodes;
  std::map<uint64_t, Placement> placed;  // by request id
  // Requests whose node was lost while no other could take them, by id:
  // placed as soon as a node can (a join, or every retry interval), failed
  // once they have waited connect_timeout_s.
  std::map<uint64_t, std::pair<Placement, std::string>> parked;
  bool retry_scheduled = false;
  std::map<uint64_t, PdRequest> pd;      // disaggregated requests, by the head's id
  std::map<uint64_t, uint64_t> pd_wire;  // their current wire ids -> the head's id
  uint64_t next_wire = first_wire_id;
  std::map<uint64_t, Move> moving;  // by the head's id
  std::set<uint64_t> rebalanced;    // requests a rebalance moved (or tried to): never again
  uint64_t stop_token = 0;         // held by the engine that spawned the router
  // The LoRA adapters of the first node that joined to run whole requests
  // (its welcome's, then as changed through this head), and adapter_list()
  // of them: every other such node must have the same.
  std::optional<std::vector<NodeAdapter>> adapters;  // (bytes unknown here: 0)
  std::string adapter_list;
  std::shared_ptr<ServedAdapters> served;  // the head's engine's copy of `adapters`
  bool adapter_change = false;  // one load or drop at a time
  // The loads made through this head and not dropped since, by id, as sent,
  // and the drops made through it (id -> name): a node that joins having
  // missed some of them (it restarted, or was down, since) gets them then.
  std::map<int32_t, fb::AdapterChangeT> loaded_here;
  std::map<int32_t, std::string> dropped_here;
  // Loads made through another head that share these nodes, by id: heard
  // from a node (AdapterNews) but not yet from every one that runs whole
  // requests. Each joins the set once all hold it, and from then on counts
  // as made here too (loaded_here: a node that missed it is given it).
  struct Learned {
    fb::AdapterChangeT change;
    std::string fingerprint;
  };
  std::map<int32_t, Learned> learning;
  int32_t next_adapter_id = 1;  // the ids this head picks only grow
  // Nodes whose join came while an adapter change was going out: they join
  // once it has settled, against the set it left.
  struct WaitingJoin {
    int node = 0;
    caf::actor gateway;
    fb::NodeWelcomeT welcome;
    RequestSession session;
  };
  std::vector<WaitingJoin> joins_waiting;
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

void pd_node_failed(Self* self, int i, uint64_t wire, const std::string& why);
bool fail_over(Self* self, uint64_t id, Placement p, const std::string& why, bool counts = true);
void place_parked(Self* self);
void moves_lost_with(Self* self, int i);
void drop_move(Self* self, uint64_t id, const std::string& why);
bool keep_for_move(Self* self, int node, std::unique_ptr<fb::TokenStreamItemT>& item);

void adopt_learned(Self* self);

// The node leaves the rotation; its requests go on elsewhere (fail_over)
// or end with `why`.
void lose_node(Self* self, int i, const std::string& why) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  std::vector<uint64_t> ids, pairs;
  for (uint64_t id : n.requests) (id >= first_wire_id ? pairs : ids).push_back(id);
  n.requests.clear();
  n.gateway = caf::actor{};
  n.gone_token = 0;
  n.error = why;
  s.policy->set_alive(i, false);
  adopt_learned(self);  // it may have been the one node still without another head's load
  log_node(self, i, "lost (" + why + "); " + std::to_string(ids.size()) + " request(s) on it" +
                        (pairs.empty() ? "" : ", " + std::to_string(pairs.size()) + " disaggregated one(s)"));
  const std::string what = "worker node " + n.address.str() + " was lost: " + why;
  moves_lost_with(self, i);
  std::vector<uint64_t> failed;
  for (uint64_t id : ids) {
    auto it = s.placed.find(id);
    if (it == s.placed.end() || it->second.node != i) continue;  // a move's target copy: its move handles it
    Placement p = std::move(it->second);
    s.placed.erase(it);
    if (!fail_over(self, id, std::move(p), what)) failed.push_back(id);
  }
  if (!failed.empty()) self->send(s.detokenizer, stream_atom::value, WireMessage{error_stream(failed, ErrorKind::unavailable, what)});
  for (uint64_t wire : pairs) pd_node_failed(self, i, wire, what);
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

// Whether `a` is a load another head is making on the nodes (its id, name
// and file those a node reported).
bool being_learned(const RouterState& s, const fb::NodeAdapterT& a) {
  auto l = s.learning.find(a.id);
  return l != s.learning.end() && l->second.change.name == a.name && l->second.fingerprint == a.fingerprint;
}

// adapter_list()'s text of the head's set.
std::string adapter_text(const std::vector<NodeAdapter>& adapters) {
  fb::NodeWelcomeT w;
  describe_adapters(adapters, w);
  return adapter_list(w);
}

// After every change to the head's set: its text, and the engine's copy.
void adapters_changed(RouterState& s) {
  s.adapter_list = adapter_text(*s.adapters);
  if (!s.served) return;
  ServedAdapters::List list;
  for (const NodeAdapter& a : *s.adapters) list.emplace_back(a.name, a.id);
  s.served->set(std::move(list));
}

// Another head's loads that every joined node running whole requests now
// holds (the same id, name and file) join this head's set, served here by
// name, and are given to nodes that missed them as this head's own are.
void adopt_learned(Self* self) {
  auto& s = self->state;
  if (!s.adapters) return;
  for (auto l = s.learning.begin(); l != s.learning.end();) {
    const fb::AdapterChangeT& c = l->second.change;
    const std::string& fp = l->second.fingerprint;
    bool everywhere = true, anywhere = false;
    for (const NodeLink& n : s.nodes) {
      if (!n.gateway || n.mode == "decode") continue;
      anywhere = true;
      everywhere = everywhere && std::any_of(n.adapters.begin(), n.adapters.end(), [&](const NodeAdapter& a) {
                     return a.id == c.id && a.name == c.name && a.fingerprint == fp;
                   });
    }
    if (!anywhere || !everywhere) {
      ++l;
      continue;
    }
    const bool taken = std::any_of(s.adapters->begin(), s.adapters->end(),
                                   [&](const NodeAdapter& a) { return a.id == c.id || a.name == c.name; });
    if (!taken) {
      s.adapters->push_back({c.name, c.id, fp, 0});
      s.loaded_here[c.id] = c;
      s.dropped_here.erase(c.id);
      adapters_changed(s);
      std::fprintf(stderr, "actorlm head: LoRA adapter %s #%d, loaded through another head, is on every node: served here too\n",
                   c.name.c_str(), c.id);
    }
    l = s.learning.erase(l);
  }
}

// A node's word that a head sharing it changed its adapters: its list is
// kept, a load is learned (adopt_learned), and a drop leaves this head's set
// at once (no request of this head is sent with it again: the other head
// drops it on every node).
void on_adapter_news(Self* self, const WireMessage& in) {
  auto& s = self->state;
  const caf::actor_addr from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto it = std::find_if(s.nodes.begin(), s.nodes.end(), [&](const NodeLink& n) { return n.gateway && n.gateway.address() == from; });
  if (it == s.nodes.end() || it->mode == "decode") return;
  const int i = static_cast<int>(it - s.nodes.begin());
  std::string error;
  auto news = msg::unpack<fb::AdapterNews>(in.bytes, &error);
  if (!news || !news->change) {
    log_node(self, i, "sent unreadable adapter news: " + (news ? std::string("no change") : error));
    return;
  }
  it->adapters.clear();
  for (const auto& a : news->adapters) it->adapters.push_back({a->name, a->id, a->fingerprint, 0});
  if (!s.adapters) return;
  const fb::AdapterChangeT& c = *news->change;
  if (c.load) {
    const bool ours = std::any_of(s.adapters->begin(), s.adapters->end(), [&](const NodeAdapter& a) { return a.id == c.id; });
    if (!ours && s.learning.count(c.id) == 0) s.learning[c.id] = {c, news->fingerprint};
    adopt_learned(self);
    return;
  }
  s.learning.erase(c.id);
  auto a = std::find_if(s.adapters->begin(), s.adapters->end(), [&](const NodeAdapter& x) { return x.id == c.id; });
  if (a == s.adapters->end()) return;
  std::fprintf(stderr, "actorlm head: LoRA adapter %s #%d dropped through another head: no longer served here\n",
               a->name.c_str(), a->id);
  s.dropped_here[a->id] = a->name;
  s.loaded_here.erase(a->id);
  s.adapters->erase(a);
  adapters_changed(s);
}

// An id for a load through this head: above every id any node, this
// head's set or its history holds, so two heads sharing nodes do not pick
// one id for two adapters unless they load at the same moment (then a node
// refuses the second, and that load fails whole).
int32_t pick_adapter_id(RouterState& s) {
  int32_t top = s.next_adapter_id - 1;
  if (s.adapters) {
    for (const NodeAdapter& a : *s.adapters) top = std::max(top, a.id);
  }
  for (const NodeLink& n : s.nodes) {
    for (const NodeAdapter& a : n.adapters) top = std::max(top, a.id);
  }
  if (!s.learning.empty()) top = std::max(top, s.learning.rbegin()->first);
  if (!s.loaded_here.empty()) top = std::max(top, s.loaded_here.rbegin()->first);
  if (!s.dropped_here.empty()) top = std::max(top, s.dropped_here.rbegin()->first);
  s.next_adapter_id = top + 2;
  return top + 1;
}

// The changes made through this head that a joining node missed (it
// restarted, or was down, since), when they are all that differs: drops of
// adapters it still has (e.g. named by its own --lora), then loads it
// lacks, in the head's order. Without them its list is the head's.
std::optional<std::vector<fb::AdapterChangeT>> missed_changes(const RouterState& s, const fb::NodeWelcomeT& w) {
  std::set<int32_t> ours;
  for (const NodeAdapter& a : *s.adapters) ours.insert(a.id);
  std::vector<fb::AdapterChangeT> missed;
  std::vector<NodeAdapter> theirs_kept;
  std::set<int32_t> theirs;
  for (const auto& a : w.adapters) {
    if (being_learned(s, *a)) continue;  // another head's load, on its way to every node
    auto drop = s.dropped_here.find(a->id);
    if (ours.count(a->id) == 0 && drop != s.dropped_here.end() && drop->second == a->name) {
      fb::AdapterChangeT c;
      c.load = false;
      c.id = a->id;
      c.name = a->name;
      missed.push_back(std::move(c));
    } else {
      theirs_kept.push_back({a->name, a->id, a->fingerprint, 0});
      theirs.insert(a->id);
    }
  }
  std::vector<NodeAdapter> ours_kept;
  for (const NodeAdapter& a : *s.adapters) {
    auto load = s.loaded_here.find(a.id);
    if (load != s.loaded_here.end() && theirs.count(a.id) == 0) {
      missed.push_back(load->second);
    } else {
      ours_kept.push_back(a);
    }
  }
  if (missed.empty() || adapter_text(ours_kept) != adapter_text(theirs_kept)) return std::nullopt;
  return missed;
}

// Node i stays out: its gateway is watched, and it is dialled again once
// that connection goes (the node restarted, perhaps set right).
void refuse(Self* self, int i, const caf::actor& gateway, const std::string& why) {
  NodeLink& n = self->state.nodes[static_cast<size_t>(i)];
  n.dialling = false;
  if (why != n.error) log_node(self, i, "cannot join: " + why);
  n.error = why;
  n.refused = gateway;
  n.gone_token = watch(self, i, gateway);
}

void joined(Self* self, int i, const caf::actor& gateway, const fb::NodeWelcomeT& w, RequestSession session);

// Makes the changes `missing[k...]` on joining node i one after another,
// then joins it as if its welcome had said what they did (joined() checks
// the whole list again); a change it cannot make keeps it out with the
// reason.
void catch_up(Self* self, int i, const caf::actor& gateway, std::shared_ptr<fb::NodeWelcomeT> w,
              std::shared_ptr<RequestSession> session, std::shared_ptr<std::vector<fb::AdapterChangeT>> missing, size_t k) {
  if (k == missing->size()) return joined(self, i, gateway, *w, std::move(*session));
  if (k == 0) {
    log_node(self, i, "makes the " + std::to_string(missing->size()) + " LoRA adapter change(s) made through this head that it missed");
  }
  const fb::AdapterChangeT& c = (*missing)[k];
  auto failed = [self, i, gateway, name = c.name, load = c.load](const std::string& why) {
    refuse(self, i, gateway,
           load ? "it lacks LoRA adapter " + name + ", loaded through this head, and could not load it: " + why
                : "it has LoRA adapter " + name + ", dropped through this head, and could not drop it: " + why);
  };
  self->request(gateway, adapter_timeout, adapter_atom::value, WireMessage{session->seal(RequestKind::adapter, msg::pack(c))})
      .then(
          [self, i, gateway, w, session, missing, k, failed](const WireMessage& m) {
            std::string why;
            auto r = msg::unpack<fb::AdapterReply>(m.bytes, &why);
            if (!r) return failed("an unreadable answer: " + why);
            if (!r->error.empty()) return failed(r->error);
            const fb::AdapterChangeT& done = (*missing)[k];
            if (done.load) {
              auto na = std::make_unique<fb::NodeAdapterT>();
              na->name = done.name;
              na->id = done.id;
              na->fingerprint = r->fingerprint;
              w->adapters.push_back(std::move(na));
            } else {
              std::erase_if(w->adapters, [&](const auto& a) { return a->id == done.id; });
            }
            catch_up(self, i, gateway, w, session, missing, k + 1);
          },
          [self, failed](const caf::error& e) { failed(self->system().render(e)); });
}

void joined(Self* self, int i, const caf::actor& gateway, const fb::NodeWelcomeT& w, RequestSession session) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  if (w.role == "worker") return dial_failed(self, i, "a worker node (--role worker) takes a --remote-worker head, not --node");
  // An adapter change going out now was sent only to the nodes joined
  // before it: this one would miss it. It joins once the change settles.
  if (s.adapter_change && w.disaggregation_mode != "decode") {
    auto copy = msg::unpack<fb::NodeWelcome>(msg::pack(w), nullptr);  // w is the caller's
    if (!copy) return dial_failed(self, i, "its welcome could not be kept");
    log_node(self, i, "waits for the LoRA adapter change under way before it joins");
    s.joins_waiting.push_back({i, gateway, std::move(*copy), std::move(session)});
    return;
  }
  NodeModel theirs{w.model_name, w.vocab_size, w.n_layers, w.hidden, w.tokenizer_digest};
  std::string bad = model_mismatch(s.model, theirs);
  // A request names its adapter by the id the head gave it: a node that
  // runs whole requests must hold the very adapters under the same ids (a
  // decode node runs none: adapter requests are not split).
  if (bad.empty() && w.disaggregation_mode != "decode") {
    // Another head's load on its way to every node is not yet in this
    // head's set, and does not keep a node that has it already out.
    fb::NodeWelcomeT served;
    for (const auto& a : w.adapters) {
      if (!s.adapters || !being_learned(s, *a)) served.adapters.push_back(std::make_unique<fb::NodeAdapterT>(*a));
    }
    const std::string theirs_list = adapter_list(served);
    if (!s.adapters) {
      s.adapters.emplace();
      for (const auto& a : w.adapters) s.adapters->push_back({a->name, a->id, a->fingerprint, 0});
      adapters_changed(s);
    } else if (theirs_list != s.adapter_list) {
      auto missing = missed_changes(s, w);
      auto copy = missing ? msg::unpack<fb::NodeWelcome>(msg::pack(w), nullptr) : std::nullopt;
      if (copy) {
        return catch_up(self, i, gateway, std::make_shared<fb::NodeWelcomeT>(std::move(*copy)),
                        std::make_shared<RequestSession>(std::move(session)),
                        std::make_shared<std::vector<fb::AdapterChangeT>>(std::move(*missing)), 0);
      }
      bad = "its LoRA adapters [" + theirs_list + "] are not the other nodes' [" + s.adapter_list + "]";
    }
  }
  if (!bad.empty()) return refuse(self, i, gateway, bad);
  n.dialling = false;
  n.error.clear();
  n.gateway = gateway;
  n.session = std::move(session);
  n.refused = caf::actor{};
  n.gone_token = watch(self, i, gateway);
  n.mode = w.disaggregation_mode;
  n.kv_tokens = w.kv_tokens;
  n.kv_token_bytes = w.kv_token_bytes * w.n_layers;
  n.draining = false;
  n.adapters.clear();
  for (const auto& a : w.adapters) n.adapters.push_back({a->name, a->id, a->fingerprint, 0});
  // Decode nodes take no prompts of their own: the prefix policy never
  // picks them (pick_decode does).
  s.policy->set_alive(i, n.mode != "decode");
  if (w.kv_tokens > 0) s.policy->set_capacity(i, w.kv_tokens);
  log_node(self, i, "joined (" + w.device + ", " + std::to_string(w.kv_tokens) + " KV tokens" +
                        (n.mode.empty() ? "" : ", " + n.mode) + ")");
  adopt_learned(self);
  if (!s.parked.empty()) place_parked(self);
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


// --- Prefill/decode disaggregation -------------------------------------

std::vector<int32_t> prompt_of(const std::vector<uint8_t>& bytes) {
  auto req = msg::open<fb::TokenizedRequest>(bytes);
  std::vector<int32_t> ids;
  if (req && req.message->input_ids()) ids.assign(req.message->input_ids()->begin(), req.message->input_ids()->end());
  return ids;
}

// Whether a request may run as a prefill/decode pair. A constrained one may
// not (a decode node refuses to reserve for it: its constraint state would
// have to move with the KV): a prefill node runs it whole.
bool splits(const std::vector<uint8_t>& bytes) {
  auto req = msg::open<fb::TokenizedRequest>(bytes);
  // Nor may one with a LoRA adapter: its KV never moves (Scheduler::reserve).
  return req && !(req.message->constraint() && req.message->constraint()->kind() != 0) && req.message->adapter() == 0;
}

// The request as one node of a pair gets it: under the attempt's wire id,
// and for the prefill node held, with where its KV goes.
std::vector<uint8_t> for_node(const std::vector<uint8_t>& bytes, uint64_t wire, const std::string& address,
                              uint64_t ticket, int32_t skip) {
  auto req = msg::unpack<fb::TokenizedRequest>(bytes, nullptr);
  req->request_id = wire;
  req->hold_after_prefill = !address.empty();
  req->handoff_address = address;
  req->handoff_ticket = ticket;
  req->handoff_skip = skip;
  return msg::pack(*req);
}

// The decode node for a new pair: joined, fewest requests in flight per KV
// token it holds (so a bigger pool takes more), then the lowest index.
int pick_decode(Self* self, int except = -1) {
  auto& nodes = self->state.nodes;
  int best = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeLink& n = nodes[i];
    if (!n.gateway || n.mode != "decode" || n.draining || static_cast<int>(i) == except) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const NodeLink& b = nodes[static_cast<size_t>(best)];
    const double load = double(n.requests.size() + 1) / double(std::max<int64_t>(1, n.kv_tokens));
    const double best_load = double(b.requests.size() + 1) / double(std::max<int64_t>(1, b.kv_tokens));
    if (load < best_load) best = static_cast<int>(i);
  }
  return best;
}

void send_abort(Self* self, int i, uint64_t wire, const std::string& why) {
  NodeLink& n = self->state.nodes[static_cast<size_t>(i)];
  if (!n.gateway) return;
  fb::AbortT a;
  a.request_ids = {wire};
  a.reason = why;
  self->send(n.gateway, abort_atom::value, WireMessage{n.session.seal(RequestKind::abort, msg::pack(a))});
}

// Takes the current attempt off its nodes, telling them to drop it.
void abandon_attempt(Self* self, PdRequest& r, const std::string& why) {
  auto& s = self->state;
  if (r.prefill >= 0) {
    send_abort(self, r.prefill, r.wire, why);
    s.nodes[static_cast<size_t>(r.prefill)].requests.erase(r.wire);
    s.policy->finished(r.prefill);
    r.prefill = -1;
  }
  if (r.decode >= 0) {
    send_abort(self, r.decode, r.wire, why);
    s.nodes[static_cast<size_t>(r.decode)].requests.erase(r.wire);
    r.decode = -1;
  }
  s.pd_wire.erase(r.wire);
  r.wire = 0;
}

// The request ends for its client with `e` (an error or an abort).
void end_pd(Self* self, uint64_t id, TokenEvent e) {
  auto& s = self->state;
  auto it = s.pd.find(id);
  if (it == s.pd.end()) return;
  abandon_attempt(self, it->second, e.error.empty() ? "ended by the head" : e.error);
  s.pd.erase(it);
  e.id = id;
  self->send(s.detokenizer, stream_atom::value, WireMessage{token_stream({e})});
}

void fail_pd(Self* self, uint64_t id, ErrorKind kind, const std::string& why) {
  TokenEvent e;
  e.finish = FinishReason::error;
  e.error = why;
  e.error_kind = kind;
  end_pd(self, id, std::move(e));
}

// The request as a node continuing it gets it: with the tokens it has
// produced so far, which that node takes as its output.
std::vector<uint8_t> resumed(const std::vector<uint8_t>& bytes, const std::vector<int32_t>& streamed) {
  if (streamed.empty()) return bytes;
  auto req = msg::unpack<fb::TokenizedRequest>(bytes, nullptr);
  req->resume_output = streamed;
  return msg::pack(*req);
}

// Sends the request to one node, which runs it whole (no pair).
void send_plain(Self* self, uint64_t id, int node, Placement p) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(node)];
  p.node = node;
  n.requests.insert(id);
  self->send(n.gateway, generate_atom::value, WireMessage{n.session.seal(RequestKind::generate, resumed(p.bytes, p.streamed))});
  s.placed[id] = std::move(p);
}

void on_reserved(Self* self, uint64_t wire, int decode, const WireMessage& m);

// Asks a decode node for rows for the request; its prefill node is chosen.
// With no decode node up (all lost, or not joined again yet), the prefill
// node, an engine like any other, runs the request whole: a client is not
// failed for a decode tier that is back a second later.
void reserve(Self* self, uint64_t id) {
  auto& s = self->state;
  PdRequest& r = s.pd.at(id);
  const int d = pick_decode(self);
  if (d < 0 && r.prefill >= 0 && s.nodes[static_cast<size_t>(r.prefill)].gateway) {
    std::fprintf(stderr, "actorlm head: request %llu: no decode node is up; it runs whole on prefill node %s\n",
                 static_cast<unsigned long long>(id), s.nodes[static_cast<size_t>(r.prefill)].address.str().c_str());
    const int prefill = r.prefill;
    Placement p{-1, std::move(r.bytes), {}, r.moves};
    s.pd.erase(id);
    return send_plain(self, id, prefill, std::move(p));
  }
  if (d < 0) return fail_pd(self, id, ErrorKind::unavailable, "no decode node is available");
  NodeLink& n = s.nodes[static_cast<size_t>(d)];
  r.wire = s.next_wire++;
  r.decode = d;
  s.pd_wire[r.wire] = id;
  n.requests.insert(r.wire);
  const uint64_t wire = r.wire;
  self->request(n.gateway, reserve_timeout, kv_reserve_atom::value,
                WireMessage{n.session.seal(RequestKind::kv_reserve, for_node(r.bytes, wire, "", 0, 0))})
      .then([self, wire, d](const WireMessage& m) { on_reserved(self, wire, d, m); },
            [self, wire, d](const caf::error& e) {
              fb::KvReserveReplyT failed;
              failed.error = "no answer: " + self->system().render(e);
              on_reserved(self, wire, d, WireMessage{msg::pack(failed)});
            });
}

void start_pd(Self* self, uint64_t id, int prefill) {
  PdRequest& r = self->state.pd.at(id);
  ++r.attempts;
  r.prefill = prefill;
  reserve(self, id);
}

// The current attempt failed before the client saw a token: the request
// starts again on another pair (or the same, if it is the only one), or
// fails: when the request itself is at fault, after max_pd_attempts
// attempts refused by nodes that are still up, or, when the attempt lost a
// node, once it has moved --failover-attempts times. A lost node is a move,
// as for a request on one node, and counts against the same budget
// afterwards; under a node killed every few seconds a prompt queued for
// long met three losses and failed while --failover-attempts was 50.
void retry_pd(Self* self, uint64_t id, ErrorKind kind, const std::string& why, bool node_lost = false) {
  auto& s = self->state;
  auto it = s.pd.find(id);
  if (it == s.pd.end()) return;
  PdRequest& r = it->second;
  abandon_attempt(self, r, why);
  const bool again = node_lost ? r.moves < s.config.failover_attempts : ++r.refused < max_pd_attempts;
  if (kind != ErrorKind::invalid_request && again) {
    if (node_lost) ++r.moves;
    RouteDecision d = s.policy->route(prompt_of(r.bytes));
    if (d.node >= 0) {
      std::fprintf(stderr, "actorlm head: request %llu: %s; trying again (attempt %d)\n",
                   static_cast<unsigned long long>(id), why.c_str(), r.attempts + 1);
      if (s.nodes[static_cast<size_t>(d.node)].mode == "prefill") return start_pd(self, id, d.node);
      Placement p{-1, std::move(r.bytes), {}, r.moves};
      s.pd.erase(it);
      return send_plain(self, id, d.node, std::move(p));
    }
  }
  fail_pd(self, id, kind, why);
}

void on_reserved(Self* self, uint64_t wire, int decode, const WireMessage& m) {
  auto& s = self->state;
  fb::KvReserveReplyT reply;
  if (auto r = msg::unpack<fb::KvReserveReply>(m.bytes, &reply.error)) reply = std::move(*r);
  auto c = s.pd_wire.find(wire);
  if (c == s.pd_wire.end()) {
    // Abandoned meanwhile: the rows go back.
    if (reply.ticket) send_abort(self, decode, wire, "abandoned");
    return;
  }
  const uint64_t id = c->second;
  PdRequest& r = s.pd.at(id);
  NodeLink& d = s.nodes[static_cast<size_t>(decode)];
  if (!reply.error.empty() || reply.ticket == 0) {
    d.requests.erase(wire);
    s.pd_wire.erase(wire);
    r.decode = -1;
    r.wire = 0;
    if (reply.no_room) {
      self->delayed_send(self, reserve_retry, pd_reserve_atom::value, id);
      return;
    }
    return fail_pd(self, id, ErrorKind::invalid_request, "decode node " + d.address.str() + ": " + reply.error);
  }
  NodeLink& p = s.nodes[static_cast<size_t>(r.prefill)];
  if (!p.gateway) return retry_pd(self, id, ErrorKind::unavailable, "prefill node " + p.address.str() + " was lost", true);
  p.requests.insert(wire);
  self->send(p.gateway, generate_atom::value,
             WireMessage{p.session.seal(RequestKind::generate, for_node(r.bytes, wire, d.address.str(), reply.ticket, reply.cached_tokens))});
}

// Node `i` went away or misbehaved with the attempt `wire` on it.
void pd_node_failed(Self* self, int i, uint64_t wire, const std::string& why) {
  auto& s = self->state;
  auto c = s.pd_wire.find(wire);
  if (c == s.pd_wire.end()) return;
  const uint64_t id = c->second;
  PdRequest& r = s.pd.at(id);
  if (r.prefill == i) r.prefill = -1;  // its node forgets it
  if (r.decode == i) r.decode = -1;
  if (!r.streamed) return retry_pd(self, id, ErrorKind::unavailable, why, true);
  // Past its first token the pair is done with: it goes on as a plain
  // request on a node that takes prompts.
  Placement p{-1, r.bytes, r.tokens, r.moves, r.ending};
  abandon_attempt(self, r, why);
  s.pd.erase(id);
  if (!fail_over(self, id, std::move(p), why)) {
    self->send(s.detokenizer, stream_atom::value, WireMessage{error_stream({id}, ErrorKind::unavailable, why)});
  }
}

// Request `id` lost its node (`why`): it goes on on another node, which
// computes again the KV of its prompt and of the tokens its client already
// has and continues from there: the sampler's counter, penalties, min and
// max tokens and the constraint take those tokens as its output, and the
// head's detokenizer holds the stop strings' tail, so the client gets the
// tokens the first node would have sent, none twice or missing. False (the
// request fails) when it has moved failover_attempts times or no node can
// take it.
bool fail_over(Self* self, uint64_t id, Placement p, const std::string& why, bool counts) {
  auto& s = self->state;
  if (p.ending || (counts && p.moves >= s.config.failover_attempts)) return false;
  std::vector<int32_t> ids = prompt_of(p.bytes);
  ids.insert(ids.end(), p.streamed.begin(), p.streamed.end());
  RouteDecision d = s.policy->route(ids);
  if (d.node < 0) {
    // No node now (the others lost too, or not yet back): it waits for one.
    const auto now = std::chrono::steady_clock::now();
    if (p.waits_until == std::chrono::steady_clock::time_point{}) {
      p.waits_until = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(s.config.connect_timeout_s));
      std::fprintf(stderr, "actorlm head: request %llu: %s; no node can take it now: it waits for one\n",
                   static_cast<unsigned long long>(id), why.c_str());
    }
    if (now >= p.waits_until) return false;
    s.parked[id] = {std::move(p), why};
    if (!s.retry_scheduled) {
      s.retry_scheduled = true;
      self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::duration<double>(s.config.retry_interval_s)),
                         failover_retry_atom::value);
    }
    return true;
  }
  p.waits_until = {};
  if (counts) ++p.moves;
  std::fprintf(stderr, "actorlm head: request %llu: %s; going on at node %s after %zu token(s) (move %d)\n",
               static_cast<unsigned long long>(id), why.c_str(), s.nodes[static_cast<size_t>(d.node)].address.str().c_str(),
               p.streamed.size(), p.moves);
  if (p.streamed.empty() && s.nodes[static_cast<size_t>(d.node)].mode == "prefill" && splits(p.bytes)) {
    PdRequest& r = s.pd[id];
    r.bytes = std::move(p.bytes);
    r.moves = p.moves;
    start_pd(self, id, d.node);
    return true;
  }
  send_plain(self, id, d.node, std::move(p));
  return true;
}

// Places the requests waiting for a node where one can take them now; fails
// those that waited too long.
void place_parked(Self* self) {
  auto& s = self->state;
  auto waiting = std::move(s.parked);
  s.parked.clear();
  std::vector<uint64_t> failed;
  std::string why;
  for (auto& [id, e] : waiting) {
    if (!fail_over(self, id, std::move(e.first), e.second)) {
      failed.push_back(id);
      why = e.second;
    }
  }
  if (!failed.empty()) {
    self->send(s.detokenizer, stream_atom::value,
               WireMessage{error_stream(failed, ErrorKind::unavailable, why + "; no node could take it in time")});
  }
}

// A client's abort or stop of a disaggregated request.
template <class Atom>
void cancel_pd(Self* self, Atom atom, uint64_t id, const std::string& reason) {
  auto& s = self->state;
  PdRequest& r = s.pd.at(id);
  if (r.streamed && r.decode >= 0) {
    // Decoding: the decode node ends it as a local engine would.
    r.ending = true;
    NodeLink& d = s.nodes[static_cast<size_t>(r.decode)];
    constexpr RequestKind kind = std::is_same_v<Atom, abort_atom> ? RequestKind::abort : RequestKind::stop;
    fb::AbortT a;
    a.request_ids = {r.wire};
    a.reason = reason;
    if (d.gateway) self->send(d.gateway, atom, WireMessage{d.session.seal(kind, msg::pack(a))});
    return;
  }
  TokenEvent e;
  e.finish = FinishReason::abort;
  e.error = reason;
  end_pd(self, id, std::move(e));
}

// One TokenStream item of a disaggregated attempt from node `i`: the
// prefill node's held notice or early finish, or the decode node's tokens.
void on_pd_item(Self* self, int i, std::unique_ptr<fb::TokenStreamItemT> item, fb::TokenStreamT& kept) {
  auto& s = self->state;
  const uint64_t wire = item->request_id;
  auto c = s.pd_wire.find(wire);
  if (c == s.pd_wire.end()) return;  // an abandoned attempt
  const uint64_t id = c->second;
  PdRequest& r = s.pd.at(id);
  const bool finished = item->finish_reason != fb::FinishReason::None;
  const bool failed = item->finish_reason == fb::FinishReason::Abort || item->finish_reason == fb::FinishReason::Error;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  ErrorKind kind = from_fb(item->error_kind);
  if (kind == ErrorKind::none) kind = ErrorKind::unavailable;
  if (i == r.prefill) {
    if (item->held) {  // the decode node has the KV and has started
      n.requests.erase(wire);
      s.policy->finished(i);
      r.prefill = -1;
      return;
    }
    if (!finished) return;
    if (failed) return retry_pd(self, id, kind, "prefill node " + n.address.str() + ": " + item->error);
    // It ended at its first token (a stop token, or max_tokens 1): the
    // decode node's rows go back.
    n.requests.erase(wire);
    s.policy->finished(i);
    r.prefill = -1;
    abandon_attempt(self, r, "finished on the prefill node");
    s.pd.erase(id);
  } else if (i == r.decode) {
    if (failed && !r.streamed) return retry_pd(self, id, kind, "decode node " + n.address.str() + ": " + item->error);
    r.streamed = true;
    r.tokens.insert(r.tokens.end(), item->token_ids.begin(), item->token_ids.end());
    if (finished) {
      n.requests.erase(wire);
      r.decode = -1;
      abandon_attempt(self, r, "finished");
      s.pd.erase(id);
    }
  } else {
    return;
  }
  item->request_id = id;
  kept.items.push_back(std::move(item));
}

// The request with a seed: one the head draws when the client gave none, so
// that a node continuing it after a failover draws what the first would have.
std::vector<uint8_t> seeded(const std::vector<uint8_t>& bytes) {
  auto req = msg::unpack<fb::TokenizedRequest>(bytes, nullptr);
  if (!req) return bytes;
  if (!req->sampling) req->sampling = std::make_unique<fb::SamplingParamsT>();
  if (req->sampling->has_seed) return bytes;
  req->sampling->seed = random_token();
  req->sampling->has_seed = true;
  return msg::pack(*req);
}


// --- Live migration and drain -------------------------------------------
// A drained node's running requests move to other nodes with their KV: the
// head freezes one on its node (kv_freeze), reserves rows for it on another
// (kv_reserve, with the tokens its client has as its output), orders the
// first node's KV sender to copy the rows there (kv_move), and the commit
// starts it there from its last token: no prompt token is computed again,
// and its tokens go on exactly as they would have. A request only waiting
// there starts again elsewhere; one still prefilling is asked again later.

void thaw(Self* self, int i, uint64_t from_id) {
  NodeLink& n = self->state.nodes[static_cast<size_t>(i)];
  if (!n.gateway) return;
  fb::KvMoveT order;
  order.request_id = from_id;
  self->send(n.gateway, kv_thaw_atom::value, WireMessage{n.session.seal(RequestKind::kv_thaw, msg::pack(order))});
}

// The target's copy of a move goes (its rows are given back there).
void drop_target(Self* self, Move& m, uint64_t id, const std::string& why) {
  auto& s = self->state;
  if (m.to < 0) return;
  if (!m.target_lost) send_abort(self, m.to, id, why);
  s.nodes[static_cast<size_t>(m.to)].requests.erase(id);
  if (m.adopted) s.policy->finished(m.to);
  m.to = -1;
}

// The client ended it, or its source was lost: the move stops, its target's
// copy is dropped, and the request goes the way it would without a move.
void drop_move(Self* self, uint64_t id, const std::string& why) {
  auto& s = self->state;
  auto it = s.moving.find(id);
  if (it == s.moving.end()) return;
  drop_target(self, it->second, id, why);
  s.moving.erase(it);
}

void moves_lost_with(Self* self, int i) {
  auto& s = self->state;
  std::vector<uint64_t> from_here;
  for (auto& [id, m] : s.moving) {
    if (m.from == i) from_here.push_back(id);
    // Its target copy is gone; the source's answer to the move says whether
    // the request is still there (a failed copy puts it back) or must fail over.
    if (m.to == i) m.target_lost = true;
  }
  for (uint64_t id : from_here) drop_move(self, id, "the node it moved from was lost");
}

bool keep_for_move(Self* self, int node, std::unique_ptr<fb::TokenStreamItemT>& item) {
  auto it = self->state.moving.find(item->request_id);
  if (it == self->state.moving.end() || it->second.to != node) return false;
  it->second.kept.push_back(std::move(item));
  return true;
}

void on_frozen(Self* self, uint64_t id, uint64_t token, const fb::KvFreezeReplyT& reply);
void on_move_reserved(Self* self, uint64_t id, uint64_t token, const WireMessage& m);
void on_moved(Self* self, uint64_t id, uint64_t token, const std::string& error);

void start_move(Self* self, uint64_t id, int from, int to = -1) {
  auto& s = self->state;
  Move m;
  m.from = from;
  m.wanted = to;
  if (auto p = s.placed.find(id); p != s.placed.end()) {
    if (p->second.ending || p->second.node != from) return;
    m.from_id = id;
  } else if (auto r = s.pd.find(id); r != s.pd.end()) {
    // A pair's request moves once it decodes; its prefill side finishes soon.
    if (r->second.ending || !r->second.streamed || r->second.decode != from) return;
    m.from_id = r->second.wire;
  } else {
    return;
  }
  m.token = random_token();
  m.started = std::chrono::steady_clock::now();
  const uint64_t token = m.token;
  NodeLink& n = s.nodes[static_cast<size_t>(from)];
  fb::KvMoveT order;
  order.request_id = m.from_id;
  s.moving[id] = std::move(m);
  self->request(n.gateway, reserve_timeout, kv_freeze_atom::value,
                WireMessage{n.session.seal(RequestKind::kv_freeze, msg::pack(order))})
      .then(
          [self, id, token](const WireMessage& w) {
            fb::KvFreezeReplyT reply;
            reply.state = 3;
            if (auto r = msg::unpack<fb::KvFreezeReply>(w.bytes, nullptr)) reply = std::move(*r);
            on_frozen(self, id, token, reply);
          },
          [self, id, token](const caf::error&) {
            fb::KvFreezeReplyT unknown;
            unknown.state = 3;
            on_frozen(self, id, token, unknown);
          });
}

// Where a frozen request goes: a pair's to another decode node if there is
// one; else where the prefix policy would send its prompt and output (a
// node that takes prompts); else any decode node. -1: nowhere now.
int move_target(Self* self, uint64_t id, const std::vector<int32_t>& tokens, int from, bool& adopted) {
  auto& s = self->state;
  adopted = false;
  if (s.pd.count(id)) {
    if (int d = pick_decode(self, from); d >= 0) return d;
  }
  RouteDecision d = s.policy->route(tokens);
  if (d.node >= 0 && d.node != from) {
    adopted = true;
    return d.node;
  }
  if (d.node >= 0) s.policy->finished(d.node);
  return pick_decode(self, from);
}

void on_frozen(Self* self, uint64_t id, uint64_t token, const fb::KvFreezeReplyT& reply) {
  auto& s = self->state;
  auto it = s.moving.find(id);
  if (it == s.moving.end() || it->second.token != token) {
    // Given up on meanwhile (the client ended it, or its node was lost):
    // if it is still there it goes on there.
    return;
  }
  Move& m = it->second;
  const int from = m.from;
  if (reply.state != 0) {
    s.moving.erase(it);
    auto p = s.placed.find(id);
    if (reply.state != 1 || p == s.placed.end()) return;  // busy (asked again later) or gone
    // Only waiting there: it starts again elsewhere, as a new request would.
    Placement moved = std::move(p->second);
    s.placed.erase(p);
    s.nodes[static_cast<size_t>(from)].requests.erase(id);
    s.policy->finished(from);
    if (!fail_over(self, id, std::move(moved), "its node is drained", false)) {
      self->send(s.detokenizer, stream_atom::value,
                 WireMessage{error_stream({id}, ErrorKind::unavailable, "its node is drained and no node can take it")});
    }
    return;
  }
  const bool plain = s.placed.count(id) > 0;
  const std::vector<uint8_t>& bytes = plain ? s.placed.at(id).bytes : s.pd.at(id).bytes;
  const std::vector<int32_t>& streamed = plain ? s.placed.at(id).streamed : s.pd.at(id).tokens;
  if (static_cast<size_t>(reply.output_tokens) != streamed.size() || streamed.empty()) {
    // Its node has sent a token the head has not seen yet: next time.
    thaw(self, from, m.from_id);
    s.moving.erase(it);
    return;
  }
  std::vector<int32_t> tokens = prompt_of(bytes);
  tokens.insert(tokens.end(), streamed.begin(), streamed.end());
  if (m.wanted >= 0) {
    // A rebalance goes where it was meant to, or nowhere.
    const NodeLink& w = s.nodes[static_cast<size_t>(m.wanted)];
    m.to = w.gateway && !w.draining ? m.wanted : -1;
  } else {
    m.to = move_target(self, id, tokens, from, m.adopted);
  }
  if (m.to < 0) {
    thaw(self, from, m.from_id);
    s.moving.erase(it);
    return;
  }
  NodeLink& t = s.nodes[static_cast<size_t>(m.to)];
  t.requests.insert(id);
  m.rows = static_cast<int64_t>(tokens.size()) - 1;
  self->request(t.gateway, reserve_timeout, kv_reserve_atom::value,
                WireMessage{t.session.seal(RequestKind::kv_reserve, resumed(bytes, streamed))})
      .then([self, id, token](const WireMessage& w) { on_move_reserved(self, id, token, w); },
            [self, id, token](const caf::error& e) {
              fb::KvReserveReplyT failed;
              failed.error = "no answer: " + self->system().render(e);
              on_move_reserved(self, id, token, WireMessage{msg::pack(failed)});
            });
}

void on_move_reserved(Self* self, uint64_t id, uint64_t token, const WireMessage& w) {
  auto& s = self->state;
  fb::KvReserveReplyT reply;
  if (auto r = msg::unpack<fb::KvReserveReply>(w.bytes, &reply.error)) reply = std::move(*r);
  auto it = s.moving.find(id);
  if (it == s.moving.end() || it->second.token != token) return;  // dropped: its target copy was aborted then
  Move& m = it->second;
  if (!reply.error.empty() || reply.ticket == 0 || m.target_lost) {
    if (!reply.no_room && !m.target_lost) {
      log_node(self, m.to, "refused a request moving to it: " + reply.error);
    }
    drop_target(self, m, id, "reservation refused");
    thaw(self, m.from, m.from_id);
    s.moving.erase(it);
    return;
  }
  NodeLink& f = s.nodes[static_cast<size_t>(m.from)];
  fb::KvMoveT order;
  order.request_id = m.from_id;
  order.address = s.nodes[static_cast<size_t>(m.to)].address.str();
  order.ticket = reply.ticket;
  order.skip = reply.cached_tokens;
  m.rows -= reply.cached_tokens;
  self->request(f.gateway, move_timeout, kv_move_atom::value, WireMessage{f.session.seal(RequestKind::kv_move, msg::pack(order))})
      .then([self, id, token](const std::string& error) { on_moved(self, id, token, error); },
            [self, id, token](const caf::error& e) { on_moved(self, id, token, "no answer: " + self->system().render(e)); });
}

// The request is on node `to` now (Placement), and what it sent there so
// far goes to the client.
void settle_move(Self* self, uint64_t id, Move& m) {
  auto& s = self->state;
  NodeLink& from = s.nodes[static_cast<size_t>(m.from)];
  Placement p;
  if (auto pd = s.pd.find(id); pd != s.pd.end()) {
    PdRequest& r = pd->second;
    from.requests.erase(r.wire);
    s.pd_wire.erase(r.wire);
    p = Placement{m.to, std::move(r.bytes), std::move(r.tokens), r.moves, r.ending};
    s.pd.erase(pd);
  } else {
    p = std::move(s.placed.at(id));
    from.requests.erase(id);
    s.policy->finished(m.from);
  }
  if (!m.adopted) s.policy->adopted(m.to);
  p.node = m.to;
  s.placed[id] = std::move(p);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m.started).count();
  const NodeLink& to = s.nodes[static_cast<size_t>(m.to)];
  std::fprintf(stderr, "actorlm head: request %llu moved from node %s to %s with %lld KV rows (%.1f MB) in %.0f ms\n",
               static_cast<unsigned long long>(id), from.address.str().c_str(), to.address.str().c_str(),
               static_cast<long long>(m.rows), double(m.rows * to.kv_token_bytes) / 1e6, ms);
  fb::TokenStreamT out;
  for (auto& item : m.kept) {
    if (item->finish_reason != fb::FinishReason::None) {
      s.nodes[static_cast<size_t>(m.to)].requests.erase(id);
      s.placed.erase(id);
      s.policy->finished(m.to);
    } else if (auto q = s.placed.find(id); q != s.placed.end()) {
      q->second.streamed.insert(q->second.streamed.end(), item->token_ids.begin(), item->token_ids.end());
    }
    out.items.push_back(std::move(item));
  }
  if (!out.items.empty()) self->send(s.detokenizer, stream_atom::value, WireMessage{msg::pack(out)});
}

void on_moved(Self* self, uint64_t id, uint64_t token, const std::string& error) {
  auto& s = self->state;
  auto it = s.moving.find(id);
  if (it == s.moving.end() || it->second.token != token) return;
  Move m = std::move(it->second);
  s.moving.erase(it);
  if (m.target_lost) {
    if (!error.empty()) return;  // the copy failed: it went on where it was
    // Released where it was, lost where it went: it goes on from its tokens.
    m.kept.clear();
    m.to = -1;
    Placement p;
    if (auto pd = s.pd.find(id); pd != s.pd.end()) {
      s.nodes[static_cast<size_t>(m.from)].requests.erase(pd->second.wire);
      s.pd_wire.erase(pd->second.wire);
      p = Placement{-1, std::move(pd->second.bytes), std::move(pd->second.tokens), pd->second.moves, pd->second.ending};
      s.pd.erase(pd);
    } else if (auto q = s.placed.find(id); q != s.placed.end()) {
      s.nodes[static_cast<size_t>(m.from)].requests.erase(id);
      s.policy->finished(m.from);
      p = std::move(q->second);
      s.placed.erase(q);
    } else {
      return;
    }
    if (!fail_over(self, id, std::move(p), "the node it moved to was lost")) {
      self->send(s.detokenizer, stream_atom::value,
                 WireMessage{error_stream({id}, ErrorKind::unavailable, "the node it moved to was lost")});
    }
    return;
  }
  if (!error.empty() && m.kept.empty()) {
    // Nothing came from the target: the source has put it back and goes on.
    log_node(self, m.from, "could not move request " + std::to_string(id) + ": " + error);
    drop_target(self, m, id, "the move failed");
    return;
  }
  // Done; or the target has started it although the source says otherwise
  // (an answer lost after the commit): the target's copy goes on, and the
  // source's, if it was put back, is dropped before it sends anything more.
  if (!error.empty()) send_abort(self, m.from, m.from_id, "moved to another node");
  settle_move(self, id, m);
}

void drain_tick(Self* self, int i) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  n.drain_scheduled = false;
  if (!n.draining || !n.gateway) return;
  size_t active = 0;
  for (const auto& [id, m] : s.moving) active += m.from == i ? 1 : 0;
  const std::set<uint64_t> here = n.requests;
  for (uint64_t rid : here) {
    if (active >= max_moves_per_node) break;
    uint64_t id = rid;
    if (rid >= first_wire_id) {
      auto c = s.pd_wire.find(rid);
      if (c == s.pd_wire.end()) continue;
      id = c->second;
    }
    if (s.moving.count(id)) continue;
    start_move(self, id, i);
    active += s.moving.count(id);
  }
  if (!n.requests.empty()) {
    n.drain_scheduled = true;
    self->delayed_send(self, drain_interval, drain_tick_atom::value, static_cast<int32_t>(i));
  }
}

// Every --rebalance-interval: when one node runs at least --rebalance-gap
// more requests than another of its kind, one decoding request moves from
// it to that node with its KV, one move at a time (cluster/roles/rebalancer.hpp).
std::chrono::milliseconds rebalance_every(const RouterState& s) {
  // At least 10 ms: a look is cheap, not free.
  return std::chrono::milliseconds(std::max<int64_t>(10, static_cast<int64_t>(s.config.rebalance_interval_s * 1000)));
}

void rebalance_tick(Self* self) {
  auto& s = self->state;
  self->delayed_send(self, rebalance_every(s), rebalance_tick_atom::value);
  for (const auto& [id, m] : s.moving) {
    if (m.wanted >= 0) return;
  }
  // Requests that ended leave the record.
  for (auto it = s.rebalanced.begin(); it != s.rebalanced.end();) {
    it = s.placed.count(*it) || s.pd.count(*it) ? std::next(it) : s.rebalanced.erase(it);
  }
  std::vector<RebalanceNode> loads(s.nodes.size());
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const NodeLink& n = s.nodes[i];
    loads[i] = {static_cast<int32_t>(n.requests.size()), n.gateway && !n.draining && n.mode != "prefill", n.mode == "decode"};
  }
  const auto pair = pick_nodes(loads, s.config.rebalance_gap);
  if (!pair) return;
  std::vector<RebalanceCandidate> candidates;
  for (uint64_t rid : s.nodes[static_cast<size_t>(pair->from)].requests) {
    RebalanceCandidate c;
    if (rid >= first_wire_id) {
      auto w = s.pd_wire.find(rid);
      if (w == s.pd_wire.end()) continue;
      const PdRequest& r = s.pd.at(w->second);
      // Only a decoding request can move: the others' prompts are not decoded.
      if (!r.streamed || r.ending || r.decode != pair->from) continue;
      c = {w->second, static_cast<int64_t>(prompt_of(r.bytes).size() + r.tokens.size()), true, false};
    } else {
      auto p = s.placed.find(rid);
      if (p == s.placed.end() || p->second.streamed.empty() || p->second.ending) continue;
      c = {rid, static_cast<int64_t>(prompt_of(p->second.bytes).size() + p->second.streamed.size()), true, false};
    }
    c.moved_before = s.rebalanced.count(c.id) > 0 || s.moving.count(c.id) > 0;
    candidates.push_back(c);
  }
  const auto id = pick_request(candidates);
  if (!id) return;
  s.rebalanced.insert(*id);
  log_node(self, pair->from,
           "runs " + std::to_string(loads[static_cast<size_t>(pair->from)].requests) + " requests, node " +
               s.nodes[static_cast<size_t>(pair->to)].address.str() + " " +
               std::to_string(loads[static_cast<size_t>(pair->to)].requests) + ": rebalancing moves request " +
               std::to_string(*id));
  start_move(self, *id, pair->from, pair->to);
}

void set_draining(Self* self, int i, bool on) {
  auto& s = self->state;
  NodeLink& n = s.nodes[static_cast<size_t>(i)];
  if (n.draining != on) log_node(self, i, on ? "drained: its requests move to other nodes" : "takes requests again");
  n.draining = on;
  if (n.gateway) s.policy->set_alive(i, !on && n.mode != "decode");
  if (on && !n.drain_scheduled) drain_tick(self, i);
}

// (drain_atom, id, on): the node by index or address; its state as JSON.
std::string on_drain(Self* self, const std::string& which, bool on) {
  auto& s = self->state;
  int i = -1;
  for (size_t k = 0; k < s.nodes.size(); ++k) {
    if (s.nodes[k].address.str() == which || std::to_string(k) == which) i = static_cast<int>(k);
  }
  if (i < 0) return "error: no node " + which + " (a node's index in --node order from 0, or its host:port)";
  set_draining(self, i, on);
  const NodeLink& n = s.nodes[static_cast<size_t>(i)];
  char out[512];
  std::snprintf(out, sizeof out, R"({"node":%d,"address":"%s","joined":%s,"draining":%s,"in_flight":%zu})", i,
                n.address.str().c_str(), n.gateway ? "true" : "false", on ? "true" : "false", n.requests.size());
  return out;
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
  std::vector<uint8_t> bytes = seeded(in.bytes);
  if (s.nodes[static_cast<size_t>(d.node)].mode == "prefill" && splits(bytes)) {
    s.pd[id].bytes = std::move(bytes);
    return start_pd(self, id, d.node);
  }
  send_plain(self, id, d.node, Placement{-1, std::move(bytes), {}, 0});
}

template <class Atom>
void on_cancel(Self* self, Atom atom, const WireMessage& in) {
  auto& s = self->state;
  auto a = msg::unpack<fb::Abort>(in.bytes, nullptr);
  if (!a) return;
  std::map<int, fb::AbortT> per_node;
  for (uint64_t id : a->request_ids) {
    drop_move(self, id, a->reason);  // it ends where it is
    if (s.pd.count(id)) {
      cancel_pd(self, atom, id, a->reason);
      continue;
    }
    if (auto w = s.parked.find(id); w != s.parked.end()) {
      s.parked.erase(w);
      TokenEvent e;
      e.id = id;
      e.finish = FinishReason::abort;
      e.error = a->reason;
      self->send(s.detokenizer, stream_atom::value, WireMessage{token_stream({e})});
      continue;
    }
    auto it = s.placed.find(id);
    if (it == s.placed.end()) continue;
    it->second.ending = true;
    per_node[it->second.node].request_ids.push_back(id);
    per_node[it->second.node].reason = a->reason;
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
  std::vector<uint64_t> ids, pairs;
  for (uint64_t id : n.requests) (id >= first_wire_id ? pairs : ids).push_back(id);
  const std::string what = "worker node " + n.address.str() + " " + why;
  for (uint64_t wire : pairs) {
    send_abort(self, i, wire, why);
    pd_node_failed(self, i, wire, what);
  }
  if (ids.empty()) return;
  for (uint64_t id : ids) {
    s.placed.erase(id);
    s.policy->finished(i);
    n.requests.erase(id);
  }
  fb::AbortT abort;
  abort.request_ids = ids;
  abort.reason = why;
  if (n.gateway) self->send(n.gateway, abort_atom::value, WireMessage{n.session.seal(RequestKind::abort, msg::pack(abort))});
  self->send(s.detokenizer, stream_atom::value, WireMessage{error_stream(ids, ErrorKind::unavailable, what)});
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
  bool paired = false;  // items of disaggregated requests, renamed to the head's ids
  for (auto& item : ts->items) {
    if (keep_for_move(self, node, item)) {
      paired = true;  // the stream is not passed on as it came
      continue;
    }
    if (item->request_id >= first_wire_id) {
      paired = true;
      on_pd_item(self, node, std::move(item), kept);
      continue;
    }
    if (!n.requests.count(item->request_id)) {
      ++foreign;
      continue;
    }
    if (item->finish_reason != fb::FinishReason::None) {
      n.requests.erase(item->request_id);
      s.placed.erase(item->request_id);
      s.policy->finished(node);
    } else if (auto p = s.placed.find(item->request_id); p != s.placed.end()) {
      p->second.streamed.insert(p->second.streamed.end(), item->token_ids.begin(), item->token_ids.end());
    }
    kept.items.push_back(std::move(item));
  }
  if (foreign > 0) log_node(self, node, "sent " + std::to_string(foreign) + " token stream item(s) for requests not routed there (dropped)");
  if (kept.items.empty()) return;
  self->send(s.detokenizer, stream_atom::value, foreign == 0 && !paired ? in : WireMessage{msg::pack(kept)});
}

// Sums the alive nodes' figures and lists every node.
struct StatsGather {
  caf::response_promise promise;
  EngineStatsSnapshot total;
  size_t pending = 0;
};

void finish_stats(Self* self, const std::shared_ptr<StatsGather>& g) {
  auto& s = self->state;
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    NodeStatsSnapshot& row = g->total.nodes[i];
    row.address = s.nodes[i].address.str();
    row.alive = static_cast<bool>(s.nodes[i].gateway);
    row.routed = s.policy->stats(static_cast<int>(i)).routed;
    row.in_flight = static_cast<int32_t>(s.nodes[i].requests.size());
    row.disaggregation_mode = s.nodes[i].mode;
    row.draining = s.nodes[i].draining;
    if (!row.alive) row.error = s.nodes[i].error.empty() ? "joining" : s.nodes[i].error;
  }
  g->promise.deliver(WireMessage{msg::pack(to_message(g->total))});
}

caf::result<WireMessage> on_stats(Self* self, const WireMessage& in) {
  auto& s = self->state;
  auto g = std::make_shared<StatsGather>();
  g->promise = self->make_response_promise();
  g->total.nodes.resize(s.nodes.size());
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    if (!s.nodes[i].gateway) continue;
    ++g->pending;
    self->request(s.nodes[i].gateway, stats_timeout, stats_atom::value,
                  WireMessage{s.nodes[i].session.seal(RequestKind::stats, in.bytes)})
        .then(
            [self, g, i](const WireMessage& reply) {
              auto st = msg::unpack<fb::EngineStats>(reply.bytes, nullptr);
              if (st) add_node(g->total, g->total.nodes[i], from_message(*st));
              if (--g->pending == 0) finish_stats(self, g);
            },
            [self, g, i](const caf::error& e) {
              g->total.nodes[i].error = "stats: " + self->system().render(e);
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

// Whether a request this head has in flight (placed, or waiting for a
// node) runs with adapter `id`. Adapter requests are never split over a
// prefill and a decode node, nor moved, so these are all of them.
bool adapter_in_use(const RouterState& s, int32_t id) {
  auto uses = [id](const Placement& p) {
    auto r = msg::open<fb::TokenizedRequest>(p.bytes);
    if (!r) return false;
    if (r.message->adapter() == id) return true;
    const auto* stacked = r.message->stacked_adapters();
    return stacked && std::find(stacked->begin(), stacked->end(), id) != stacked->end();
  };
  return std::any_of(s.placed.begin(), s.placed.end(), [&](const auto& kv) { return uses(kv.second); }) ||
         std::any_of(s.parked.begin(), s.parked.end(), [&](const auto& kv) { return uses(kv.second.first); });
}

WireMessage adapter_answer(std::string error) {
  fb::AdapterReplyT r;
  r.error = std::move(error);
  return WireMessage{msg::pack(r)};
}

// One adapter change on its way to the nodes.
struct AdapterGather {
  caf::typed_response_promise<WireMessage> promise;
  fb::AdapterChangeT change;
  size_t pending = 0;
  std::vector<size_t> done;     // nodes that made the change
  std::vector<std::string> errors;
  std::set<std::string> fingerprints;
  fb::AdapterReplyT first;      // a node's answer: bytes and matrices
};

void settle_adapter(Self* self, const std::shared_ptr<AdapterGather>& g) {
  auto& s = self->state;
  s.adapter_change = false;
  const fb::AdapterChangeT& c = g->change;
  std::string error;
  for (const auto& e : g->errors) error += (error.empty() ? "" : "; ") + e;
  if (c.load && error.empty() && g->fingerprints.size() > 1) {
    error = "the nodes' files named '" + c.path + "' differ";
  }
  if (!c.load) {
    // Gone from this head's set already; a node that could not drop it
    // keeps its memory until it restarts, and is said here.
    if (!error.empty()) std::fprintf(stderr, "actorlm head: LoRA adapter #%d dropped here, not on every node: %s\n", c.id, error.c_str());
    g->promise.deliver(adapter_answer(""));
    return;
  }
  if (!error.empty()) {
    // The nodes keep one set: those that loaded it drop it again.
    fb::AdapterChangeT undo;
    undo.load = false;
    undo.id = c.id;
    undo.name = c.name;
    for (size_t i : g->done) {
      NodeLink& n = s.nodes[i];
      if (!n.gateway) continue;
      self->request(n.gateway, adapter_timeout, adapter_atom::value, WireMessage{n.session.seal(RequestKind::adapter, msg::pack(undo))})
          .then([](const WireMessage&) {}, [](const caf::error&) {});
    }
    g->promise.deliver(adapter_answer(error));
    return;
  }
  s.adapters->push_back({c.name, c.id, *g->fingerprints.begin(), 0});
  s.loaded_here[c.id] = c;
  s.dropped_here.erase(c.id);
  adapters_changed(s);
  std::fprintf(stderr, "actorlm head: LoRA adapter %s #%d loaded on %zu nodes\n", c.name.c_str(), c.id, g->done.size());
  g->first.error.clear();
  g->promise.deliver(WireMessage{msg::pack(g->first)});
}

// The change has settled: the nodes that came to join meanwhile join now
// (catching up on it where they must).
void finish_adapter(Self* self, const std::shared_ptr<AdapterGather>& g) {
  settle_adapter(self, g);
  for (auto& j : std::exchange(self->state.joins_waiting, {})) {
    joined(self, j.node, j.gateway, j.welcome, std::move(j.session));
  }
}

// A LoRA adapter loaded or dropped through this head (its engine's
// load_adapter / unload_adapter, POST /v1/load_lora_adapter): every joined
// node that runs whole requests is asked, each reading the file from its
// own --lora-dir. A load counts once every such node has it (the same
// file: their fingerprints agree); where one fails, those that loaded it
// drop it again, so the nodes keep one set. A drop is refused while a
// request of this head uses the adapter, and leaves this head's set before
// the nodes are asked. A node that is down meanwhile, or comes to join
// while the change goes out, makes it when it joins (missed_changes).
caf::result<WireMessage> on_adapter(Self* self, const WireMessage& in) {
  auto& s = self->state;
  std::string error;
  auto change = msg::unpack<fb::AdapterChange>(in.bytes, &error);
  if (!change) return adapter_answer("unreadable adapter change: " + error);
  if (s.adapter_change) return adapter_answer("another adapter change is under way through this head");
  if (!s.adapters) return adapter_answer("no node has joined yet to load it on");
  std::vector<size_t> targets;
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    if (s.nodes[i].gateway && s.nodes[i].mode != "decode") targets.push_back(i);
  }
  if (targets.empty()) return adapter_answer("no node that runs whole requests is up");
  // The head's engine leaves a load's id to the router, which knows the
  // ids on the nodes, other heads' included.
  if (change->load && change->id == 0) change->id = pick_adapter_id(s);
  if (change->load && change->id > kMaxAdapterId) {
    return adapter_answer("the nodes' adapter ids are used up (" + std::to_string(kMaxAdapterId) + "): restart the nodes to load more");
  }
  if (!change->load) {
    auto it = std::find_if(s.adapters->begin(), s.adapters->end(), [&](const auto& a) { return a.id == change->id; });
    if (it == s.adapters->end()) return adapter_answer("no adapter #" + std::to_string(change->id) + " on the nodes");
    if (adapter_in_use(s, change->id)) return adapter_answer("the adapter is in use by a request");
    change->name = it->name;
    s.adapters->erase(it);
    s.loaded_here.erase(change->id);
    s.dropped_here[change->id] = change->name;
    adapters_changed(s);
  }
  s.adapter_change = true;
  auto g = std::make_shared<AdapterGather>();
  g->promise = self->make_response_promise<WireMessage>();
  g->change = *change;
  g->pending = targets.size();
  for (size_t i : targets) {
    NodeLink& n = s.nodes[i];
    const std::string where = n.address.str();
    self->request(n.gateway, adapter_timeout, adapter_atom::value, WireMessage{n.session.seal(RequestKind::adapter, msg::pack(*change))})
        .then(
            [self, g, i, where](const WireMessage& m) {
              std::string why;
              auto r = msg::unpack<fb::AdapterReply>(m.bytes, &why);
              if (!r) {
                g->errors.push_back(where + ": unreadable answer: " + why);
              } else if (!r->error.empty()) {
                g->errors.push_back(r->error);
              } else {
                g->done.push_back(i);
                if (g->change.load) g->fingerprints.insert(r->fingerprint);
                if (g->done.size() == 1) g->first = std::move(*r);
              }
              if (--g->pending == 0) finish_adapter(self, g);
            },
            [self, g, where](const caf::error& e) {
              g->errors.push_back(where + ": " + self->system().render(e));
              if (--g->pending == 0) finish_adapter(self, g);
            });
  }
  return g->promise;
}

caf::behavior router(Self* self, ClusterConfig config, NodeModel model, caf::actor detokenizer, std::string head_name,
                     uint64_t stop_token, std::shared_ptr<ServedAdapters> served) {
  auto& s = self->state;
  s.served = std::move(served);
  s.config = std::move(config);
  s.model = std::move(model);
  s.detokenizer = std::move(detokenizer);
  s.head_name = std::move(head_name);
  s.stop_token = stop_token;
  s.policy = std::make_unique<PrefixRouter>(static_cast<int>(s.config.nodes.size()), s.config.routing);
  for (size_t i = 0; i < s.config.nodes.size(); ++i) {
    s.nodes.push_back(NodeLink{s.config.nodes[i], nullptr, {}, {}, 0, {}, false, "", {}, "", 0});
    s.policy->set_alive(static_cast<int>(i), false);
  }
  for (size_t i = 0; i < s.nodes.size(); ++i) dial(self, static_cast<int>(i));
  if (s.config.rebalance_interval_s > 0 && s.nodes.size() > 1) {
    self->delayed_send(self, rebalance_every(s), rebalance_tick_atom::value);
  }
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
      [self](adapter_news_atom, const WireMessage& in) { on_adapter_news(self, in); },
      [self](stats_atom, const WireMessage& in) -> caf::result<WireMessage> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        return on_stats(self, in);
      },
      [self](flush_atom) -> caf::result<int64_t> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        return on_flush(self);
      },
      [self](pd_reserve_atom, uint64_t id) {
        if (!from_this_process(self)) return;
        auto it = self->state.pd.find(id);
        if (it != self->state.pd.end() && it->second.decode < 0 && it->second.prefill >= 0) reserve(self, id);
      },
      [self](failover_retry_atom) {
        if (!from_this_process(self)) return;
        auto& s = self->state;
        s.retry_scheduled = false;
        if (!s.parked.empty()) place_parked(self);
      },
      [self](rebalance_tick_atom) {
        if (from_this_process(self)) rebalance_tick(self);
      },
      [self](drain_tick_atom, int32_t i) {
        if (from_this_process(self) && i >= 0 && static_cast<size_t>(i) < self->state.nodes.size()) drain_tick(self, i);
      },
      [self](drain_atom, const std::string& which, bool on) -> caf::result<std::string> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        return on_drain(self, which, on);
      },
      [self](leaving_atom) {
        // Only a node's own gateway says it is leaving (CAF names the sender).
        // The answer tells it nothing more will be routed there.
        auto& s = self->state;
        const caf::actor_addr from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        for (size_t i = 0; i < s.nodes.size(); ++i) {
          if (s.nodes[i].gateway && s.nodes[i].gateway.address() == from) set_draining(self, static_cast<int>(i), true);
        }
        return true;
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
      [self](adapter_atom, const WireMessage& in) -> caf::result<WireMessage> {
        // From the head's engine only (its load_adapter / unload_adapter).
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        return on_adapter(self, in);
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
                        std::string head_name, uint64_t stop_token, std::shared_ptr<ServedAdapters> served) {
  return system.spawn<ExitProofActor<RouterState, ClusterConfig, NodeModel, caf::actor, std::string, uint64_t,
                                     std::shared_ptr<ServedAdapters>>>(
      router, std::move(config), std::move(model), std::move(detokenizer), std::move(head_name), stop_token,
      std::move(served));
}

}  // namespace actorlm
