#include "cluster/transfer/kv_sender.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>

#include "actors/wire.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/exit_proof_actor.hpp"
#include "actors/local_sender.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

struct Link {
  NodeAddress address;
  std::unique_ptr<TcpGate> gate;  // with a secret: CAF dials through it
  caf::actor gateway;             // set while joined
  RequestSession session;
  uint64_t gone_token = 0;        // names this join in the connection-lost notice
  bool dialling = false;
  std::vector<uint64_t> waiting;  // transfers waiting for the join
  uint16_t data_port = 0;         // the decode node's data port; 0: chunks over the middleman
  // A transfer over UCX to it failed: later ones take the socket (a machine
  // whose UCX cannot do what its handshake promised, e.g. cross-memory
  // attach refused between two containers), so its retries get through.
  bool ucx_failed = false;
  // Why it cannot take this node's KV (another model): it stays joined
  // there, so it is not dialled again; every transfer to it fails with this.
  std::string refused;
};

struct Transfer {
  std::string link;  // key into links
  fb::KvSendOrderT order;
  std::vector<KvChunkRange> plan;
  std::vector<uint64_t> steps;  // per chunk of plan: the step writing it (KvSendOrder::ready_step)
  size_t next = 0;      // next chunk to read
  size_t answered = 0;  // chunks the decode node took
  int in_flight = 0;
  caf::typed_response_promise<std::string> promise;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  bool data_plane = false;
  bool over_ucx = false;  // the data plane's link was UCX
  bool ring = false;      // and the decode node read the chunks in place
  bool reused = false;    // over a data plane connection an earlier transfer opened
  // Streamed: more rows may come (kv_send_more), up to `total`.
  bool open = false;
  int32_t total = 0;
  bool started = false;  // start() ran: joined, and sending or waiting for the last rows
  std::shared_ptr<KvDataFeed> feed;  // a streamed transfer's, on the data plane
  std::chrono::steady_clock::time_point last_rows = start;  // when the last rows came
  int64_t early_chunks = 0;  // sent while the prompt still computed
  // Ended while its data plane thread still ran: the outcome, delivered
  // once that thread is done with the rows.
  std::optional<std::string> ending;
};

// A transfer over the data plane runs on a thread of its own.
struct DataThread {
  std::thread thread;
  std::shared_ptr<KvDataCancel> cancel = std::make_shared<KvDataCancel>();
};

struct SenderState {
  KvSenderConfig cfg;
  uint64_t stop_token = 0;
  std::map<std::string, Link> links;  // by "host:port"
  std::map<uint64_t, Transfer> transfers;
  uint64_t next_transfer = 1;
  // Chunks sent by every transfer, over either path (the test knob
  // corrupt_chunk counts on it).
  std::shared_ptr<std::atomic<int64_t>> chunks_sent = std::make_shared<std::atomic<int64_t>>(0);
  std::map<uint64_t, DataThread> data_threads;  // by transfer
  // Data plane connections kept between transfers, shared by their threads
  // (made with the first: kept idle a third of the timeout at most, so the
  // data port's own timeout for a silent peer rarely closes one first).
  std::shared_ptr<KvDataLinks> data_links;
  static inline const char* name = "actorlm.kv_sender";

  SenderState() = default;
  SenderState(const SenderState&) = delete;
  SenderState& operator=(const SenderState&) = delete;
  // The actor ends: transfers still on the data plane are cut short, and
  // their threads joined before the actor system can go.
  ~SenderState() {
    for (auto& [id, t] : data_threads) t.cancel->cancel();
    for (auto& [id, t] : transfers) {
      if (t.feed) t.feed->stop();
    }
    for (auto& [id, t] : data_threads) t.thread.join();
  }
};

using Self = caf::stateful_actor<SenderState>;

// Ends a transfer with `error` (empty: done). Later answers for it find
// nothing and are ignored. A transfer whose data plane thread still runs is
// cut short and answered when that thread is done (kv_data_done): the
// gateway must not let the rows go while the thread may read them.
void finish(Self* self, uint64_t id, const std::string& error) {
  auto it = self->state.transfers.find(id);
  if (it == self->state.transfers.end()) return;
  if (auto d = self->state.data_threads.find(id); d != self->state.data_threads.end()) {
    if (!it->second.ending) it->second.ending = error;
    d->second.cancel->cancel();
    if (it->second.feed) it->second.feed->stop();
    return;
  }
  const Transfer& t = it->second;
  if (!error.empty()) {
    std::fprintf(stderr, "actorlm kv sender: transfer to %s failed: %s\n", t.link.c_str(), error.c_str());
  } else {
    // One line per request, as a server logs each prompt's timing: what
    // the transfer cost next to the prefill is how PD is tuned.
    // A streamed transfer's time counts from its last rows: what it added
    // to the time to first token.
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - t.last_rows).count();
    const double bytes = double(t.order.rows.size()) * double(self->state.cfg.layout.n_layers) *
                         double(self->state.cfg.layout.token_bytes);
    char streamed[160] = "";
    if (t.feed) {
      std::snprintf(streamed, sizeof streamed, "; streamed: %lld of its %zu chunks went while the prompt computed (%.1f ms in all)",
                    static_cast<long long>(t.early_chunks), t.plan.size(),
                    std::chrono::duration<double>(now - t.start).count() * 1e3);
    }
    std::fprintf(stderr, "actorlm kv sender: sent %zu tokens (%.1f MB, %zu chunks) to %s in %.1f ms (%.2f GB/s)%s%s%s\n",
                 t.order.rows.size(), bytes / 1e6, t.plan.size(), t.link.c_str(), s * 1e3, bytes / 1e9 / std::max(s, 1e-9),
                 t.ring       ? " over the data plane (UCX), read in place"
                 : t.over_ucx ? " over the data plane (UCX)"
                 : t.data_plane ? " over the data plane"
                                : "",
                 t.reused ? ", on a kept connection" : "", streamed);
  }
  it->second.promise.deliver(error);
  self->state.transfers.erase(it);
}

void commit(Self* self, uint64_t id) {
  auto& s = self->state;
  Transfer& t = s.transfers.at(id);
  Link& link = s.links.at(t.link);
  if (!link.gateway) return finish(self, id, "lost the decode node " + t.link);
  fb::KvHandoffT h;
  h.request_id = t.order.ticket;
  h.first_token = t.order.first_token;
  h.first_logprob = t.order.first_logprob;
  h.cached_tokens = t.order.cached_tokens;
  self->request(link.gateway, s.cfg.timeout, kv_commit_atom::value,
                WireMessage{link.session.seal(RequestKind::kv_commit, msg::pack(h))})
      .then(
          [self, id](const std::string& error) {
            finish(self, id, error.empty() ? "" : "the decode node refused the commit: " + error);
          },
          [self, id](const caf::error& e) { finish(self, id, "commit: " + self->system().render(e)); });
}

void send_chunk(Self* self, uint64_t id, const KvChunkRange& range, const WireMessage& reply);

// Reads chunks until `window` are unanswered or the plan is done.
void pump(Self* self, uint64_t id) {
  auto& s = self->state;
  Transfer& t = s.transfers.at(id);
  while (t.in_flight < s.cfg.window && t.next < t.plan.size()) {
    const KvChunkRange r = t.plan[t.next++];
    ++t.in_flight;
    fb::KvRowsRequestT read;
    read.rows.assign(t.order.rows.begin() + r.first_token, t.order.rows.begin() + r.last_token);
    read.first_layer = r.first_layer;
    read.last_layer = r.last_layer;
    self->request(s.cfg.worker, s.cfg.timeout, kv_read_atom::value, WireMessage{msg::pack(read)})
        .then([self, id, r](const WireMessage& reply) { send_chunk(self, id, r, reply); },
              [self, id](const caf::error& e) { finish(self, id, "reading KV: " + self->system().render(e)); });
  }
}

void send_chunk(Self* self, uint64_t id, const KvChunkRange& range, const WireMessage& reply) {
  auto& s = self->state;
  auto it = s.transfers.find(id);
  if (it == s.transfers.end()) return;
  Transfer& t = it->second;
  std::string error;
  auto rows = msg::unpack<fb::KvRowsReply>(reply.bytes, &error);
  if (rows && !rows->error.empty()) error = rows->error;
  if (!rows || !error.empty()) return finish(self, id, "reading KV: " + error);
  Link& link = s.links.at(t.link);
  if (!link.gateway) return finish(self, id, "lost the decode node " + t.link);
  std::vector<uint8_t> chunk =
      encode_kv_chunk(t.order.ticket, s.cfg.layout, static_cast<int32_t>(t.order.rows.size()), range, rows->data);
  if (s.chunks_sent->fetch_add(1) == s.cfg.corrupt_chunk) chunk[chunk.size() / 2] ^= 0x10;
  self->request(link.gateway, s.cfg.timeout, kv_chunk_atom::value,
                WireMessage{link.session.seal(RequestKind::kv_chunk, chunk)})
      .then(
          [self, id](const std::string& refused) {
            auto it = self->state.transfers.find(id);
            if (it == self->state.transfers.end()) return;
            if (!refused.empty()) return finish(self, id, "the decode node refused a chunk: " + refused);
            Transfer& t = it->second;
            --t.in_flight;
            if (++t.answered == t.plan.size()) return commit(self, id);
            pump(self, id);
          },
          [self, id](const caf::error& e) { finish(self, id, "sending a chunk: " + self->system().render(e)); });
}

// Starts a transfer whose link is joined: over the decode node's data port
// when it has one, else chunk by chunk over the middleman.
void start(Self* self, uint64_t id) {
  auto& s = self->state;
  Transfer& t = s.transfers.at(id);
  const Link& link = s.links.at(t.link);
  t.started = true;
  // A streamed prompt goes as it computes only over the data plane; else
  // once all of it is there (on_more starts it again).
  if (t.open && !(link.data_port && s.cfg.stream)) return;
  if (!link.data_port) return pump(self, id);
  t.data_plane = true;
  KvDataTarget target{link.address.host, link.data_port, link.session.key(), s.cfg.data_protection,
                      link.ucx_failed ? DataTransport::socket : s.cfg.data_transport};
  KvDataSend send;
  send.ticket = t.order.ticket;
  send.rows = t.order.rows;
  send.plan = t.plan;
  send.worker = s.cfg.worker;
  send.spans = s.cfg.spans;
  send.timeout = s.cfg.timeout;
  send.pause_per_chunk = s.cfg.pause_per_chunk;
  // The test knob counts chunks across transfers, as the middleman path does.
  send.corrupt_chunk = s.cfg.corrupt_chunk;
  send.sent = s.chunks_sent;
  DataThread& d = s.data_threads[id];
  send.cancel = d.cancel;
  if (!s.data_links && s.cfg.keep_connections) {
    s.data_links = std::make_shared<KvDataLinks>();
  }
  send.links = s.data_links;
  if (t.open) {
    t.feed = std::make_shared<KvDataFeed>();
    // Every row and chunk through the feed, each chunk with its step.
    t.feed->add(t.order.rows, t.plan, t.steps, false);
    send.rows.clear();
    send.plan.clear();
    send.feed = t.feed;
    send.tokens = t.total;
    send.clock = s.cfg.clock;
  }
  d.thread = std::thread([&sys = self->system(), me = caf::actor_cast<caf::actor_addr>(self), id, target = std::move(target),
                          send = std::move(send)] {
    const KvDataResult r = send_kv_over_data_plane(sys, target, send);
    // From an actor of this process, which the sender checks.
    caf::scoped_actor from{sys};
    if (auto to = caf::actor_cast<caf::actor>(me)) {
      from->send(to, kv_data_done_atom::value, id, r.error, r.transport == DataTransport::ucx, r.ring, r.early_chunks, r.reused);
    }
  });
}

void lose_link(Self* self, const std::string& key, const std::string& why) {
  auto& s = self->state;
  Link& link = s.links.at(key);
  link.gateway = caf::actor{};
  link.gone_token = 0;
  std::vector<uint64_t> ids;
  for (const auto& [id, t] : s.transfers) {
    if (t.link == key) ids.push_back(id);
  }
  for (uint64_t id : ids) finish(self, id, "lost the decode node " + key + ": " + why);
}

void joined(Self* self, const std::string& key, const caf::actor& gateway, const fb::NodeWelcomeT& w,
            RequestSession session) {
  auto& s = self->state;
  Link& link = s.links.at(key);
  link.dialling = false;
  std::vector<uint64_t> waiting = std::move(link.waiting);
  link.waiting.clear();
  // Any engine node takes KV (a decode node from a prefill node, any node a
  // request migrating to it); its reservation said it can.
  std::string bad = model_mismatch(s.cfg.model, {w.model_name, w.vocab_size, w.n_layers, w.hidden, w.tokenizer_digest});
  if (bad.empty() && w.role != "engine") bad = key + " is not an engine node";
  if (!bad.empty()) {
    link.refused = bad;
    for (uint64_t id : waiting) finish(self, id, bad);
    return;
  }
  link.gateway = gateway;
  link.session = std::move(session);
  // The data port is on the host this sender reached the node at.
  link.data_port = s.cfg.data_plane && link.session.has_key() && w.kv_data_port > 0 && w.kv_data_port <= 65535
                       ? static_cast<uint16_t>(w.kv_data_port)
                       : 0;
  link.gone_token = random_token();
  gateway->attach_functor([me = caf::actor_cast<caf::actor_addr>(self), key, token = link.gone_token](const caf::error& reason) {
    if (auto to = caf::actor_cast<caf::actor>(me)) caf::anon_send(to, node_gone_atom::value, key, token, reason);
  });
  for (uint64_t id : waiting) {
    if (s.transfers.count(id)) start(self, id);
  }
}

void dial(Self* self, const std::string& key) {
  auto& s = self->state;
  Link& link = s.links.at(key);
  link.dialling = true;
  auto failed = [self, key](const std::string& why) {
    Link& link = self->state.links.at(key);
    link.dialling = false;
    std::vector<uint64_t> waiting = std::move(link.waiting);
    link.waiting.clear();
    for (uint64_t id : waiting) finish(self, id, "cannot join the decode node " + key + ": " + why);
  };
  if (!link.gate) {
    try {
      link.gate = open_dial_gate(link.address, s.cfg.security);
    } catch (const std::exception& e) {
      return failed(e.what());
    }
  }
  join_node(
      self, link.address, link.gate.get(), s.cfg.security.secret, s.cfg.name, s.cfg.timeout,
      [self, key](const caf::actor& gateway, const fb::NodeWelcomeT& w, RequestSession session) {
        joined(self, key, gateway, w, std::move(session));
      },
      failed);
}

// Chunks of rows [first, last). Rows a step is still writing go a layer per
// chunk (or less), each as soon as the step has stored it: what is left
// when the step ends is its last layer, not the last few.
std::vector<KvChunkRange> plan_for(const KvSenderConfig& cfg, int32_t first, int32_t last, bool layer_by_layer) {
  const int64_t one_layer = static_cast<int64_t>(last - first) * cfg.layout.token_bytes;
  return plan_kv_chunks(first, last, cfg.layout, layer_by_layer ? std::min(cfg.chunk_bytes, one_layer) : cfg.chunk_bytes);
}

caf::result<std::string> on_send(Self* self, const WireMessage& in) {
  auto& s = self->state;
  std::string error;
  auto order = msg::unpack<fb::KvSendOrder>(in.bytes, &error);
  if (!order) return "unreadable KV send order: " + error;
  if (order->rows.empty()) return std::string("nothing to send");
  NodeAddress address;
  try {
    address = parse_node_address(order->address);
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  if (std::string bad = s.cfg.security.check(address.host); !bad.empty()) return address.str() + ": " + bad;
  const std::string key = address.str();
  auto [link, fresh] = s.links.try_emplace(key);
  if (fresh) link->second.address = address;
  if (!link->second.refused.empty()) return link->second.refused;
  if (order->streaming && (order->total_tokens <= 0 || order->rows.size() > static_cast<size_t>(order->total_tokens))) {
    return "a streamed KV send order of " + std::to_string(order->rows.size()) + " rows of " +
           std::to_string(order->total_tokens);
  }
  const uint64_t id = s.next_transfer++;
  Transfer& t = s.transfers[id];
  t.link = key;
  t.open = order->streaming;
  t.total = order->streaming ? order->total_tokens : static_cast<int32_t>(order->rows.size());
  t.plan = plan_for(s.cfg, 0, static_cast<int32_t>(order->rows.size()), order->streaming && order->ready_step != 0);
  t.steps.assign(t.plan.size(), order->streaming ? order->ready_step : 0);
  t.order = std::move(*order);
  t.promise = self->make_response_promise<std::string>();
  auto promise = t.promise;
  if (link->second.gateway) {
    start(self, id);
  } else {
    link->second.waiting.push_back(id);
    if (!link->second.dialling) dial(self, key);
  }
  return promise;
}

// More rows of a streamed transfer (kv_send_more): the rows after those it
// has, whose chunks join its plan; the last order closes it with the first
// token.
void on_more(Self* self, const WireMessage& in) {
  auto& s = self->state;
  std::string error;
  auto order = msg::unpack<fb::KvSendOrder>(in.bytes, &error);
  if (!order) return;
  auto it = std::find_if(s.transfers.begin(), s.transfers.end(),
                         [&](const auto& x) { return x.second.open && x.second.order.ticket == order->ticket; });
  if (it == s.transfers.end()) return;  // it ended (failed or stopped): its answer went or goes
  const uint64_t id = it->first;
  Transfer& t = it->second;
  const size_t had = t.order.rows.size();
  const size_t now = had + order->rows.size();
  if (now > static_cast<size_t>(t.total) || (!order->streaming && now != static_cast<size_t>(t.total))) {
    return finish(self, id, "a streamed transfer given " + std::to_string(now) + " rows of its " + std::to_string(t.total));
  }
  const std::vector<KvChunkRange> more =
      plan_for(s.cfg, static_cast<int32_t>(had), static_cast<int32_t>(now), order->streaming && order->ready_step != 0);
  t.plan.insert(t.plan.end(), more.begin(), more.end());
  const std::vector<uint64_t> steps(more.size(), order->streaming ? order->ready_step : 0);
  t.steps.insert(t.steps.end(), steps.begin(), steps.end());
  t.order.rows.insert(t.order.rows.end(), order->rows.begin(), order->rows.end());
  if (!order->streaming) {
    t.open = false;
    t.last_rows = std::chrono::steady_clock::now();
    t.order.first_token = order->first_token;
    t.order.first_logprob = order->first_logprob;
    t.order.cached_tokens = order->cached_tokens;
  }
  if (t.feed) return t.feed->add(order->rows, more, steps, !t.open);
  if (t.started && !t.open) start(self, id);  // it waited for the whole prompt
}

caf::behavior sender(Self* self, KvSenderConfig cfg, uint64_t stop_token) {
  self->state.cfg = std::move(cfg);
  self->state.stop_token = stop_token;
  return {
      [self](kv_send_atom, const WireMessage& in) -> caf::result<std::string> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        return on_send(self, in);
      },
      [self](node_gone_atom, const std::string& key, uint64_t token, const caf::error& reason) {
        auto it = self->state.links.find(key);
        if (it == self->state.links.end() || token == 0 || token != it->second.gone_token) return;
        lose_link(self, key, self->system().render(reason));
      },
      [self](kv_data_done_atom, uint64_t id, const std::string& error, bool over_ucx, bool ring, int64_t early_chunks,
             bool reused) {
        if (!from_this_process(self)) return;
        auto& s = self->state;
        if (auto d = s.data_threads.find(id); d != s.data_threads.end()) {
          d->second.thread.join();  // it sent this as its last act
          s.data_threads.erase(d);
        }
        auto t = s.transfers.find(id);
        if (t == s.transfers.end()) return;
        t->second.over_ucx = over_ucx;
        t->second.ring = ring;
        t->second.early_chunks = early_chunks;
        t->second.reused = reused;
        if (over_ucx && !error.empty()) {
          if (auto l = s.links.find(t->second.link); l != s.links.end() && !l->second.ucx_failed) {
            l->second.ucx_failed = true;
            std::fprintf(stderr, "actorlm kv sender: a transfer to %s over UCX failed; its next ones take the socket\n",
                         t->second.link.c_str());
          }
        }
        if (t->second.ending) return finish(self, id, *t->second.ending);
        if (!error.empty()) return finish(self, id, "over the data plane: " + error);
        commit(self, id);
      },
      [self](kv_send_more_atom, const WireMessage& in) {
        if (from_this_process(self)) on_more(self, in);
      },
      [self](kv_send_stop_atom, uint64_t ticket) {
        if (!from_this_process(self)) return;
        std::vector<uint64_t> ids;
        for (const auto& [id, t] : self->state.transfers) {
          if (t.order.ticket == ticket) ids.push_back(id);
        }
        for (uint64_t id : ids) finish(self, id, "stopped: its request was aborted");
      },
      [self](shutdown_atom, uint64_t token) {
        if (token == self->state.stop_token) self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_kv_sender(caf::actor_system& system, KvSenderConfig config, uint64_t stop_token) {
  return system.spawn<ExitProofActor<SenderState, KvSenderConfig, uint64_t>>(sender, std::move(config), stop_token);
}

}  // namespace actorlm
