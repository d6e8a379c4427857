// A head's router against nodes that misbehave: two stand-in gateways in a
// second actor system (a peer process, reached through the middleman on
// loopback) that join as real nodes do, and then forge down and exit
// messages, stream items for requests routed to the other node, and corrupt
// token streams and stats replies. The test is the router's detokenizer, so
// it sees exactly what the router passes on.

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "actors/engine_core.hpp"
#include "actors/wire.hpp"
#include "cluster/roles/router_actor.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "cluster/transport/request_session.hpp"
#include "messages/envelope.hpp"
#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "model/model_config.hpp"

using namespace actorlm;

namespace {

constexpr auto reply_timeout = std::chrono::seconds(10);

// A node's gateway reduced to what the router sees of it. It tells `probe`
// (in its own system) what arrives: (generate_atom, node, request id,
// resume_output, seed or 0) and
// (abort_atom, node, WireMessage{Abort}). From `probe` it takes
// (stream_atom, bytes) to send to the router as its own token stream,
// (adapter_news_atom, bytes) as its own adapter news, and
// (status_atom) -> the router's handle. A KV reservation (a decode node's
// part of a split request) is told as (kv_reserve_atom, node) and refused, or, once
// `probe` has sent (kv_reserve_atom), granted with a ticket. Stats are answered with `stats_reply`.
// An adapter change is told to `probe` as (adapter_atom, node, load, id,
// name) and answered (fingerprint "fp-" + name; a load of a name
// "fail-<this node>" fails) only when `probe` sends (adapter_atom). A gateway made `closed` answers no join (the router dials
// it again) until `probe` sends (join_atom), and then tells `probe` of each
// join it answers: (join_atom, node).
struct FakeGatewayState {
  int32_t index = 0;
  caf::actor probe, router;
  std::vector<uint8_t> welcome, stats_reply, nonce;
  RequestSession session;
  bool closed = false, tell_joins = false, grant_reservations = false;
  uint64_t next_ticket = 1;
  std::vector<std::pair<caf::typed_response_promise<WireMessage>, std::string>> held;
  static inline const char* name = "test.fake_gateway";
};

caf::behavior fake_gateway(caf::stateful_actor<FakeGatewayState>* self, int32_t index, caf::actor probe,
                           std::vector<uint8_t> welcome, std::vector<uint8_t> stats_reply, bool closed) {
  auto& s = self->state;
  s.index = index;
  s.probe = std::move(probe);
  s.welcome = std::move(welcome);
  s.stats_reply = std::move(stats_reply);
  s.closed = s.tell_joins = closed;
  return {
      [self](hello_atom, const WireMessage&) {
        fb::NodeChallengeT c;
        c.protocol = cluster_protocol;
        c.nonce = make_nonce();
        self->state.nonce = c.nonce;
        return WireMessage{msg::pack(c)};
      },
      [self](join_atom, const WireMessage& in) {
        // No Catch2 assertions in here: this runs on a CAF worker thread.
        auto j = msg::unpack<fb::NodeJoin>(in.bytes, nullptr);
        if (!j || self->state.closed) return WireMessage{};
        self->state.session = RequestSession(session_key("", self->state.nonce, j->head_nonce));
        self->state.router = caf::actor_cast<caf::actor>(self->current_sender());
        if (self->state.tell_joins) self->send(self->state.probe, join_atom::value, self->state.index);
        return WireMessage{self->state.welcome};
      },
      [self](join_atom) { self->state.closed = false; },
      [self](adapter_atom, const WireMessage& sealed) -> caf::result<WireMessage> {
        auto opened = self->state.session.open(RequestKind::adapter, sealed.bytes);
        std::optional<fb::AdapterChangeT> c;
        if (opened) c = msg::unpack<fb::AdapterChange>(*opened, nullptr);
        if (!c) return WireMessage{};
        self->send(self->state.probe, adapter_atom::value, self->state.index, c->load, c->id, c->name);
        auto answer = self->make_response_promise<WireMessage>();
        const bool fails = c->load && c->name == "fail-" + std::to_string(self->state.index);
        self->state.held.emplace_back(answer, fails ? "" : c->name);
        return answer;
      },
      [self](adapter_atom) {
        for (auto& [answer, name] : std::exchange(self->state.held, {})) {
          fb::AdapterReplyT r;
          r.fingerprint = "fp-" + name;
          if (name.empty()) r.error = "no adapter file by that name";
          answer.deliver(WireMessage{msg::pack(r)});
        }
      },
      [self](generate_atom, const WireMessage& sealed) {
        auto opened = self->state.session.open(RequestKind::generate, sealed.bytes);
        std::optional<fb::TokenizedRequestT> req;
        if (opened) req = msg::unpack<fb::TokenizedRequest>(*opened, nullptr);
        if (!req) return;  // the test then times out waiting for it
        self->send(self->state.probe, generate_atom::value, self->state.index, req->request_id, req->resume_output,
                   req->sampling && req->sampling->has_seed ? req->sampling->seed : uint64_t{0});
      },
      [self](abort_atom, const WireMessage& sealed) {
        auto opened = self->state.session.open(RequestKind::abort, sealed.bytes);
        if (!opened) return;
        self->send(self->state.probe, abort_atom::value, self->state.index, WireMessage{*opened});
      },
      [self](stats_atom, const WireMessage&) { return WireMessage{self->state.stats_reply}; },
      [self](kv_reserve_atom, const WireMessage&) {
        self->send(self->state.probe, kv_reserve_atom::value, self->state.index);
        if (!self->state.grant_reservations) return WireMessage{};  // unreadable: refused
        fb::KvReserveReplyT r;
        r.ticket = self->state.next_ticket++;
        return WireMessage{msg::pack(r)};
      },
      [self](kv_reserve_atom) { self->state.grant_reservations = true; },
      [self](stream_atom, const WireMessage& bytes) { self->send(self->state.router, stream_atom::value, bytes); },
      [self](adapter_news_atom a, const WireMessage& bytes) { self->send(self->state.router, a, bytes); },
      [self](status_atom) { return self->state.router; },
  };
}

WireMessage tokenized(uint64_t id, int32_t adapter = 0) {
  fb::TokenizedRequestT t;
  t.request_id = id;
  t.adapter = adapter;
  // A prompt of its own, so no request has a cached prefix on a node.
  t.input_ids = {static_cast<int32_t>(500 + id), 3458, 282};
  t.sampling = std::make_unique<fb::SamplingParamsT>();
  t.stop = std::make_unique<fb::StopConditionsT>();
  t.stop->max_new_tokens = 8;
  return {msg::pack(t)};
}

// One item for `id`: a token, or the end with `finish`.
WireMessage stream_item(uint64_t id, fb::FinishReason finish = fb::FinishReason::None) {
  fb::TokenStreamT ts;
  auto item = std::make_unique<fb::TokenStreamItemT>();
  item->request_id = id;
  item->token_ids = {42};
  item->finish_reason = finish;
  ts.items.push_back(std::move(item));
  return {msg::pack(ts)};
}

// What a fake node got: which node, and the request's resume_output and seed.
struct Arrival {
  int32_t node = -1;
  std::vector<int32_t> resume;
  uint64_t seed = 0;
};

// (joined, total) as the router reports them.
std::pair<int32_t, int32_t> router_status(caf::scoped_actor& self, const caf::actor& router) {
  std::pair<int32_t, int32_t> out{-1, -1};
  self->request(router, reply_timeout, status_atom::value)
      .receive([&](int32_t up, int32_t total, const std::string&) { out = {up, total}; },
               [&](const caf::error& e) { FAIL("router did not answer: " << self->system().render(e)); });
  return out;
}

// Token stream items the router passed on, by request id, until `until`
// holds or `deadline` passes.
using Seen = std::map<uint64_t, std::vector<fb::TokenStreamItemT>>;
void receive_streams(caf::scoped_actor& detok, Seen& seen, const std::function<bool()>& until,
                     std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (!until() && std::chrono::steady_clock::now() < end) {
    detok->receive(
        [&](stream_atom, const WireMessage& in) {
          auto ts = msg::unpack<fb::TokenStream>(in.bytes, nullptr);
          REQUIRE(ts);
          for (auto& item : ts->items) seen[item->request_id].push_back(std::move(*item));
        },
        caf::after(std::chrono::milliseconds(100)) >> [] {});
  }
}

NodeModel default_node_model() {
  const std::string model_path = default_model_path();
  auto tok = load_tokenizer(model_path);
  return describe_model(model_path, config_from_gguf(GgufFile::open(model_path)), *tok);
}

// LoRA adapters (name, id) as a node lists them, each file "fp-" + its name.
std::vector<std::unique_ptr<fb::NodeAdapterT>> node_adapters(const std::vector<std::pair<std::string, int32_t>>& list) {
  std::vector<std::unique_ptr<fb::NodeAdapterT>> out;
  for (const auto& [name, id] : list) {
    auto a = std::make_unique<fb::NodeAdapterT>();
    a->name = name;
    a->id = id;
    a->fingerprint = "fp-" + name;
    out.push_back(std::move(a));
  }
  return out;
}

// An engine node's welcome for `model`, with these LoRA adapters (name, id),
// in disaggregation mode `mode` ("" runs whole requests).
std::vector<uint8_t> engine_welcome(const NodeModel& model,
                                    const std::vector<std::pair<std::string, int32_t>>& adapters = {},
                                    const std::string& mode = "") {
  fb::NodeWelcomeT w;
  w.accepted = true;
  w.role = "engine";
  w.model_name = model.name;
  w.vocab_size = model.vocab_size;
  w.n_layers = model.n_layers;
  w.hidden = model.hidden;
  w.tokenizer_digest = model.tokenizer_digest;
  w.kv_tokens = 1024;
  w.disaggregation_mode = mode;
  w.adapters = node_adapters(adapters);
  return msg::pack(w);
}

// A head's router over stand-in gateways, one per welcome (node i is
// fake_gateway i, closed where `closed` says), each side in an actor system
// of its own (two processes, as it were: loopback, no secret, so no gate and
// the middleman alone). The router's client is `client`; the gateways tell
// `probe`. Every actor is stopped on the way out, also after a failed
// REQUIRE: the systems' destructors wait for them.
struct HeadOverFakes {
  static caf::actor_system_config& remote(caf::actor_system_config& cfg) {
    configure_remote(cfg, RemoteSecurity{});
    return cfg;
  }
  caf::actor_system_config peer_cfg, head_cfg;
  caf::actor_system peers{remote(peer_cfg)};
  caf::scoped_actor probe{peers};
  std::vector<caf::actor> fakes;
  caf::actor_system head{remote(head_cfg)};
  caf::scoped_actor client{head};
  uint64_t stop_token = random_token();
  std::shared_ptr<ServedAdapters> served = std::make_shared<ServedAdapters>();  // what the head's engine reads
  caf::actor router;

  HeadOverFakes(const NodeModel& model, const std::vector<std::vector<uint8_t>>& welcomes,
                const std::vector<uint8_t>& stats_reply, const std::function<bool(int32_t)>& closed,
                int32_t failover_attempts = ClusterConfig{}.failover_attempts) {
    ClusterConfig cc;
    cc.retry_interval_s = 0.2;
    cc.failover_attempts = failover_attempts;
    for (int32_t i = 0; i < static_cast<int32_t>(welcomes.size()); ++i) {
      fakes.push_back(peers.spawn(fake_gateway, i, caf::actor_cast<caf::actor>(probe), welcomes[static_cast<size_t>(i)],
                                  stats_reply, closed(i)));
      cc.nodes.push_back(NodeAddress{"127.0.0.1", publish_actor(peers, fakes.back(), "127.0.0.1", 0)});
    }
    router = spawn_router(head, cc, model, caf::actor_cast<caf::actor>(client), "test head", stop_token, served);
  }
  ~HeadOverFakes() {
    caf::anon_send(router, shutdown_atom::value, stop_token);
    for (const auto& f : fakes) caf::anon_send_exit(f, caf::exit_reason::user_shutdown);
  }
};

void wait_joined(caf::scoped_actor& self, const caf::actor& router, int32_t n) {
  const auto by = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (router_status(self, router).first < n && std::chrono::steady_clock::now() < by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

TEST_CASE("A head's router keeps a misbehaving node to its own requests and survives its forgeries", "[actors][cluster]") {
  const NodeModel model = default_node_model();
  HeadOverFakes h(model, {engine_welcome(model), engine_welcome(model)}, {1, 2, 3, 4}, [](int32_t) { return false; });
  caf::scoped_actor& probe = h.probe;
  caf::scoped_actor& detok = h.client;
  const std::vector<caf::actor>& fakes = h.fakes;
  const caf::actor& router = h.router;
  wait_joined(detok, router, 2);
  REQUIRE(router_status(detok, router) == std::make_pair(2, 2));

  // Two requests: the second goes to the other node (load first).
  std::map<uint64_t, int32_t> placed;
  std::map<uint64_t, Arrival> first;
  for (uint64_t id : {uint64_t{1}, uint64_t{2}}) {
    detok->send(router, generate_atom::value, tokenized(id), caf::actor_cast<caf::actor>(detok));
    probe->receive(
        [&](generate_atom, int32_t node, uint64_t got, const std::vector<int32_t>& resume, uint64_t seed) {
          placed[got] = node;
          first[got] = {node, resume, seed};
        },
        caf::after(reply_timeout) >> [] { FAIL("a request did not reach a node"); });
  }
  // The client gave no seed: the head drew one, so that a node taking the
  // request over draws the same numbers.
  CHECK(first[1].seed != 0);
  CHECK(first[1].seed != first[2].seed);
  CHECK(first[1].resume.empty());
  REQUIRE(placed.size() == 2);
  REQUIRE(placed[1] != placed[2]);
  const caf::actor& node_a = fakes[static_cast<size_t>(placed[1])];  // serves request 1
  const caf::actor& node_b = fakes[static_cast<size_t>(placed[2])];  // serves request 2
  caf::actor router_seen_by_peer;
  probe->request(node_a, reply_timeout, status_atom::value)
      .receive([&](const caf::actor& r) { router_seen_by_peer = r; }, [](const caf::error&) { FAIL("no router handle"); });
  REQUIRE(router_seen_by_peer);

  // Node A forges node B's departure (down and exit messages naming B's
  // gateway), tells the router to die (exit with kill, and a shutdown
  // without the token), and writes into request 2, which runs on B.
  probe->send(router_seen_by_peer, caf::down_msg{node_b.address(), caf::exit_reason::remote_link_unreachable});
  probe->send(router_seen_by_peer, caf::exit_msg{node_b.address(), caf::exit_reason::remote_link_unreachable});
  probe->send(router_seen_by_peer, caf::exit_msg{node_a.address(), caf::exit_reason::kill});
  probe->send(router_seen_by_peer, shutdown_atom::value, uint64_t{0});
  probe->send(node_a, stream_atom::value, stream_item(2, fb::FinishReason::Length));
  // A's own token for request 1, sent after all of that over the same connection.
  probe->send(node_a, stream_atom::value, stream_item(1));
  Seen seen;
  receive_streams(detok, seen, [&] { return seen.count(1) > 0; });
  REQUIRE(seen.count(1) == 1);
  CHECK(seen[1].size() == 1);
  CHECK(seen.count(2) == 0);  // neither A's item nor a "lost" error for B
  CHECK(router_status(detok, router) == std::make_pair(2, 2));

  SECTION("corrupt token streams fail the sender's requests, and the node is told to free them") {
    WireMessage truncated = stream_item(2);
    truncated.bytes.resize(truncated.bytes.size() / 2);
    WireMessage flipped = stream_item(2);
    flipped.bytes[flipped.bytes.size() - 6] ^= 0x04;
    for (const WireMessage& bad : {truncated, flipped, WireMessage{{0xde, 0xad}}, WireMessage{}}) {
      probe->send(node_b, stream_atom::value, bad);
    }
    receive_streams(detok, seen, [&] { return seen.count(2) > 0; });
    REQUIRE(seen.count(2) == 1);
    REQUIRE(seen[2].size() == 1);
    CHECK(seen[2][0].finish_reason == fb::FinishReason::Error);
    CHECK(seen[2][0].error.find("unreadable token stream") != std::string::npos);
    bool aborted = false;
    probe->receive(
        [&](abort_atom, int32_t node, const WireMessage& m) {
          auto a = msg::unpack<fb::Abort>(m.bytes, nullptr);
          REQUIRE(a);
          CHECK(node == placed[2]);
          aborted = a->request_ids == std::vector<uint64_t>{2};
        },
        caf::after(reply_timeout) >> [] {});
    CHECK(aborted);
    // Request 1, on A, is untouched; the router still routes to both.
    CHECK(seen[1].size() == 1);
    CHECK(router_status(detok, router) == std::make_pair(2, 2));
  }

  SECTION("unreadable stats replies leave that node's numbers out, not the router") {
    detok->request(router, reply_timeout, stats_atom::value, WireMessage{msg::pack(fb::StatsRequestT{})})
        .receive(
            [](const WireMessage& r) {
              auto st = msg::unpack<fb::EngineStats>(r.bytes, nullptr);
              REQUIRE(st);
              REQUIRE(st->nodes.size() == 2);
              for (const auto& n : st->nodes) CHECK(n->alive);
              CHECK(st->pool_capacity_tokens == 0);
            },
            [](const caf::error&) { FAIL("no stats"); });
  }

  SECTION("a node that really goes has its requests go on on another, from the proxy's notice in the head's process") {
    caf::anon_send_exit(node_a, caf::exit_reason::user_shutdown);
    // Request 1 moves to B with the one token its client has and its seed.
    Arrival moved;
    uint64_t moved_id = 0;
    probe->receive(
        [&](generate_atom, int32_t node, uint64_t got, const std::vector<int32_t>& resume, uint64_t seed) {
          moved_id = got;
          moved = {node, resume, seed};
        },
        caf::after(reply_timeout) >> [] { FAIL("the lost node's request went nowhere"); });
    CHECK(moved_id == 1);
    CHECK(moved.node == placed[2]);
    CHECK(moved.resume == std::vector<int32_t>{42});
    CHECK(moved.seed == first[1].seed);
    CHECK(router_status(detok, router).first == 1);
    // B's tokens for it reach the client; nothing about it failed.
    probe->send(node_b, stream_atom::value, stream_item(1, fb::FinishReason::Length));
    receive_streams(detok, seen, [&] { return seen[1].size() > 1; });
    REQUIRE(seen[1].size() == 2);
    CHECK(seen[1][1].finish_reason == fb::FinishReason::Length);
    CHECK(seen[1][1].error.empty());
  }
}

TEST_CASE("A node that comes to join while a LoRA adapter change goes out joins after it with the change made, one that missed a load and a drop gets both, and a load one node fails is dropped again on the others", "[actors][cluster][lora]") {
  const NodeModel model = default_node_model();
  // Node 0 is up; node 1 comes to join during a load; node 2, started with
  // a (its --lora) as 0 and 1 were, comes back after a load of c and a drop
  // of a, both made through the head while it was away.
  const std::vector<uint8_t> with_a = engine_welcome(model, {{"a", 1}});
  HeadOverFakes h(model, {with_a, with_a, with_a}, {}, [](int32_t i) { return i > 0; });
  caf::scoped_actor& probe = h.probe;
  caf::scoped_actor& engine = h.client;
  const std::vector<caf::actor>& fakes = h.fakes;
  const caf::actor& router = h.router;
  wait_joined(engine, router, 1);
  REQUIRE(router_status(engine, router).first == 1);

  // The changes a node is asked to make, in order: (node, load, id, name).
  using Change = std::tuple<int32_t, bool, int32_t, std::string>;
  auto next_change = [&]() {
    Change got{-1, false, 0, ""};
    probe->receive([&](adapter_atom, int32_t node, bool load, int32_t id, const std::string& name) { got = {node, load, id, name}; },
                   caf::after(reply_timeout) >> [] {});
    return got;
  };
  auto change = [](bool load, int32_t id, const std::string& name) {
    fb::AdapterChangeT c;
    c.load = load;
    c.id = id;
    c.name = name;
    c.path = name + ".gguf";
    return WireMessage{msg::pack(c)};
  };
  auto answer = [&]() {
    std::string error = "no answer";
    engine->receive(
        [&](const WireMessage& m) {
          auto r = msg::unpack<fb::AdapterReply>(m.bytes, nullptr);
          error = r ? r->error : "unreadable";
        },
        caf::after(reply_timeout) >> [] {});
    return error;
  };

  // A load of c reaches node 0, which holds its answer; node 1 comes to join
  // meanwhile and is kept waiting, not joined with a set that lacks c.
  engine->send(router, adapter_atom::value, change(true, 3, "c"));
  REQUIRE(next_change() == Change{0, true, 3, "c"});
  probe->send(fakes[1], join_atom::value);
  bool asked = false;
  probe->receive([&](join_atom, int32_t node) { asked = node == 1; }, caf::after(reply_timeout) >> [] {});
  REQUIRE(asked);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(router_status(engine, router).first == 1);
  // Node 0 answers: the load is made, and node 1 is given c before it joins.
  probe->send(fakes[0], adapter_atom::value);
  CHECK(answer().empty());
  REQUIRE(next_change() == Change{1, true, 3, "c"});
  CHECK(router_status(engine, router).first == 1);
  probe->send(fakes[1], adapter_atom::value);
  wait_joined(engine, router, 2);
  CHECK(router_status(engine, router).first == 2);

  // a is dropped on the two joined nodes.
  engine->send(router, adapter_atom::value, change(false, 1, "a"));
  std::set<int32_t> dropped_on;
  for (int k = 0; k < 2; ++k) {
    const Change c = next_change();
    CHECK(std::get<1>(c) == false);
    CHECK(std::get<2>(c) == 1);
    dropped_on.insert(std::get<0>(c));
  }
  CHECK(dropped_on == std::set<int32_t>{0, 1});
  probe->send(fakes[0], adapter_atom::value);
  probe->send(fakes[1], adapter_atom::value);
  CHECK(answer().empty());

  // A load that fails on node 1 is dropped again on node 0, which made it:
  // the nodes keep one set.
  engine->send(router, adapter_atom::value, change(true, 4, "fail-1"));
  for (int k = 0; k < 2; ++k) CHECK(std::get<1>(next_change()) == true);
  probe->send(fakes[0], adapter_atom::value);
  probe->send(fakes[1], adapter_atom::value);
  CHECK(answer() == "no adapter file by that name");
  CHECK(next_change() == Change{0, false, 4, "fail-1"});
  probe->send(fakes[0], adapter_atom::value);

  // Node 2 comes back with a and without c: a is dropped there, c loaded,
  // and then it joins.
  probe->send(fakes[2], join_atom::value);
  REQUIRE(next_change() == Change{2, false, 1, "a"});
  probe->send(fakes[2], adapter_atom::value);
  REQUIRE(next_change() == Change{2, true, 3, "c"});
  probe->send(fakes[2], adapter_atom::value);
  wait_joined(engine, router, 3);
  CHECK(router_status(engine, router) == std::make_pair(3, 3));
}

namespace {

// A node's AdapterNews: another head's change (load or drop of name#id)
// and the node's list after it, every file "fp-" + its name.
WireMessage adapter_news(bool load, int32_t id, const std::string& name,
                         const std::vector<std::pair<std::string, int32_t>>& list) {
  fb::AdapterNewsT n;
  n.change = std::make_unique<fb::AdapterChangeT>();
  n.change->load = load;
  n.change->id = id;
  n.change->name = name;
  n.change->path = name + ".gguf";
  if (load) n.fingerprint = "fp-" + name;
  n.adapters = node_adapters(list);
  return {msg::pack(n)};
}

// The adapters the head serves by name (the list its engine reads), waiting
// up to a few seconds for them to be `want` (messages to the router are on
// their way).
ServedAdapters::List served(const ServedAdapters& by_head, const ServedAdapters::List& want) {
  ServedAdapters::List got = by_head.get();
  const auto by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got != want && std::chrono::steady_clock::now() < by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    got = by_head.get();
  }
  return got;
}

}  // namespace

TEST_CASE("LoRA adapters loaded through another head sharing the nodes are served here once every node holds them, and dropped ones at once", "[actors][cluster][lora]") {
  const NodeModel model = default_node_model();
  using Set = std::vector<std::pair<std::string, int32_t>>;
  // Nodes 0 and 1 are up with a (their --lora); node 2, started with a and
  // with f (which another head is loading meanwhile), joins later.
  const std::vector<uint8_t> with_a = engine_welcome(model, {{"a", 1}});
  HeadOverFakes h(model, {with_a, with_a, engine_welcome(model, {{"a", 1}, {"f", 9}})}, {},
                  [](int32_t i) { return i == 2; });
  caf::scoped_actor& probe = h.probe;
  caf::scoped_actor& engine = h.client;
  const std::vector<caf::actor>& fakes = h.fakes;
  const caf::actor& router = h.router;
  wait_joined(engine, router, 2);
  REQUIRE(router_status(engine, router).first == 2);
  REQUIRE(served(*h.served, {{"a", 1}}) == Set{{"a", 1}});

  // Another head loads c as #5: node 0 has it, node 1 not yet: not served.
  probe->send(fakes[0], adapter_news_atom::value, adapter_news(true, 5, "c", {{"a", 1}, {"c", 5}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(served(*h.served, {{"a", 1}}) == Set{{"a", 1}});
  // Node 1 has it too: served here.
  probe->send(fakes[1], adapter_news_atom::value, adapter_news(true, 5, "c", {{"a", 1}, {"c", 5}}));
  CHECK(served(*h.served, {{"a", 1}, {"c", 5}}) == Set{{"a", 1}, {"c", 5}});

  // A load through this head with no id takes one above every id the nodes
  // hold, other heads' included.
  auto next_change = [&]() {
    std::tuple<int32_t, bool, int32_t, std::string> got{-1, false, 0, ""};
    probe->receive([&](adapter_atom, int32_t node, bool load, int32_t id, const std::string& name) { got = {node, load, id, name}; },
                   caf::after(reply_timeout) >> [] {});
    return got;
  };
  fb::AdapterChangeT d;
  d.load = true;
  d.name = "d";
  d.path = "d.gguf";
  engine->send(router, adapter_atom::value, WireMessage{msg::pack(d)});
  std::set<int32_t> asked;
  for (int k = 0; k < 2; ++k) {
    const auto c = next_change();
    CHECK(std::get<2>(c) == 6);
    asked.insert(std::get<0>(c));
  }
  CHECK(asked == std::set<int32_t>{0, 1});
  probe->send(fakes[0], adapter_atom::value);
  probe->send(fakes[1], adapter_atom::value);
  std::string error = "no answer";
  engine->receive([&](const WireMessage& m) {
    auto r = msg::unpack<fb::AdapterReply>(m.bytes, nullptr);
    error = r ? r->error : "unreadable";
  }, caf::after(reply_timeout) >> [] {});
  CHECK(error.empty());
  CHECK(served(*h.served, {{"a", 1}, {"c", 5}, {"d", 6}}) == Set{{"a", 1}, {"c", 5}, {"d", 6}});

  // The other head drops c: gone here at the first node's word.
  probe->send(fakes[1], adapter_news_atom::value, adapter_news(false, 5, "c", {{"a", 1}, {"d", 6}}));
  CHECK(served(*h.served, {{"a", 1}, {"d", 6}}) == Set{{"a", 1}, {"d", 6}});
  // Unreadable news changes nothing.
  probe->send(fakes[0], adapter_news_atom::value, WireMessage{{1, 2, 3}});
  // The other head loads e (#7) on both nodes, and starts on f (#9).
  for (int32_t i = 0; i < 2; ++i) {
    probe->send(fakes[static_cast<size_t>(i)], adapter_news_atom::value,
                adapter_news(true, 7, "e", {{"a", 1}, {"d", 6}, {"e", 7}}));
  }
  CHECK(served(*h.served, {{"a", 1}, {"d", 6}, {"e", 7}}) == Set{{"a", 1}, {"d", 6}, {"e", 7}});
  probe->send(fakes[0], adapter_news_atom::value, adapter_news(true, 9, "f", {{"a", 1}, {"d", 6}, {"e", 7}, {"f", 9}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  // Node 2 comes with a and f: it is given d (loaded here) and e (learned
  // here: counted as made here) and joins; f, on its way, keeps it out of
  // nothing.
  probe->send(fakes[2], join_atom::value);
  REQUIRE(next_change() == std::make_tuple(int32_t{2}, true, int32_t{6}, std::string("d")));
  probe->send(fakes[2], adapter_atom::value);
  REQUIRE(next_change() == std::make_tuple(int32_t{2}, true, int32_t{7}, std::string("e")));
  probe->send(fakes[2], adapter_atom::value);
  wait_joined(engine, router, 3);
  CHECK(router_status(engine, router) == std::make_pair(3, 3));
  CHECK(served(*h.served, {{"a", 1}, {"d", 6}, {"e", 7}}) == Set{{"a", 1}, {"d", 6}, {"e", 7}});
  // Node 1 has f as well: now every node holds it.
  probe->send(fakes[1], adapter_news_atom::value, adapter_news(true, 9, "f", {{"a", 1}, {"d", 6}, {"e", 7}, {"f", 9}}));
  CHECK(served(*h.served, {{"a", 1}, {"d", 6}, {"e", 7}, {"f", 9}}) == Set{{"a", 1}, {"d", 6}, {"e", 7}, {"f", 9}});
}

TEST_CASE("A request with a LoRA adapter runs whole on a prefill node, where one without is split with a decode node", "[actors][cluster][lora]") {
  const NodeModel model = default_node_model();
  HeadOverFakes h(model, {engine_welcome(model, {{"a", 1}}, "prefill"), engine_welcome(model, {}, "decode")}, {},
                  [](int32_t) { return false; });
  wait_joined(h.client, h.router, 2);
  REQUIRE(router_status(h.client, h.router) == std::make_pair(2, 2));
  // What reaches the nodes first for request `id`: (reservations on the
  // decode node, the node its prompt went to or -1).
  auto first_steps = [&](uint64_t id, int32_t adapter) {
    h.client->send(h.router, generate_atom::value, tokenized(id, adapter), caf::actor_cast<caf::actor>(h.client));
    std::pair<int, int32_t> seen{0, -1};
    const auto by = std::chrono::steady_clock::now() + reply_timeout;
    while (seen.first == 0 && seen.second < 0 && std::chrono::steady_clock::now() < by) {
      h.probe->receive([&](kv_reserve_atom, int32_t) { ++seen.first; },
                       [&](generate_atom, int32_t node, uint64_t got, const std::vector<int32_t>&, uint64_t) {
                         if (got == id) seen.second = node;
                       },
                       caf::after(std::chrono::milliseconds(100)) >> [] {});
    }
    return seen;
  };
  // The adapter's request goes whole to the prefill node: its KV never moves.
  CHECK(first_steps(1, 1) == std::make_pair(0, 0));
  // The base model's request is split: the decode node is asked to reserve
  // its KV first (and refuses, so the head tries again later: this comes
  // last, so that no retry of it is counted above).
  CHECK(first_steps(2, 0).first > 0);
}

TEST_CASE("A split request that loses its prefill node before its first token starts again as often as --failover-attempts allows, then fails", "[actors][cluster][pd]") {
  const NodeModel model = default_node_model();
  // Six prefill nodes (one still up at the end: the budget fails it, not a
  // lack of nodes) and a decode node that grants every reservation.
  std::vector<std::vector<uint8_t>> welcomes(6, engine_welcome(model, {}, "prefill"));
  welcomes.push_back(engine_welcome(model, {}, "decode"));
  HeadOverFakes h(model, welcomes, {}, [](int32_t) { return false; }, 4);
  wait_joined(h.client, h.router, 7);
  REQUIRE(router_status(h.client, h.router) == std::make_pair(7, 7));
  h.probe->send(h.fakes[6], kv_reserve_atom::value);
  h.client->send(h.router, generate_atom::value, tokenized(1), caf::actor_cast<caf::actor>(h.client));
  // The prefill node the request's prompt reaches next, or -1.
  auto prompt_at = [&](std::chrono::milliseconds wait = reply_timeout) {
    int32_t at = -1;
    const auto by = std::chrono::steady_clock::now() + wait;
    while (at < 0 && std::chrono::steady_clock::now() < by) {
      h.probe->receive([&](kv_reserve_atom, int32_t) {},
                       [&](generate_atom, int32_t node, uint64_t, const std::vector<int32_t>&, uint64_t) { at = node; },
                       [&](abort_atom, int32_t, const WireMessage&) {},
                       caf::after(std::chrono::milliseconds(100)) >> [] {});
    }
    return at;
  };
  Seen seen;
  std::set<int32_t> lost;
  // Four losses are four moves: each time it starts again on a prefill
  // node still up (three attempts in all was the limit whatever the flag said).
  for (int move = 0; move <= 4; ++move) {
    INFO("move " << move);
    const int32_t at = prompt_at();
    REQUIRE(at >= 0);
    REQUIRE(at < 6);
    CHECK(lost.count(at) == 0);
    caf::anon_send_exit(h.fakes[static_cast<size_t>(at)], caf::exit_reason::user_shutdown);
    lost.insert(at);
    if (move < 4) {
      receive_streams(h.client, seen, [] { return false; }, std::chrono::milliseconds(200));
      CHECK(seen[1].empty());  // the client has heard nothing of it
    }
  }
  // The fifth loss is past the budget: the client is told, and the node
  // still up is not tried.
  receive_streams(h.client, seen, [&] { return !seen[1].empty(); });
  REQUIRE(seen[1].size() == 1);
  CHECK(seen[1][0].finish_reason == fb::FinishReason::Error);
  CHECK(seen[1][0].error.find("was lost") != std::string::npos);
  CHECK(prompt_at(std::chrono::seconds(1)) == -1);
}
