#include "actors/actor_worker.hpp"

#include <caf/all.hpp>
#include <cstdio>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "actors/forward_codec.hpp"
#include "actors/silence.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

// For a worker that sends no beats (a head's link to a worker node, which
// speaks request/response only): holds one step's request and reports its
// outcome to `reply_to` as (step_done_atom | step_failed_atom, id, ...). No
// timeout on the request: the link answers every forward with an error once
// the node's connection is gone, and the scheduler monitors the link.
//
// The worker is the relay's spawn argument rather than a message field: CAF
// 0.17 spawns an actor function without arguments by dereferencing a null
// pointer to its empty argument tuple (UBSan's report in the sanitizer build).
caf::behavior step_relay(caf::event_based_actor* self, caf::actor worker) {
  return {
      [self, worker](forward_atom, uint64_t id, const WireMessage& batch, const caf::actor& reply_to) {
        self->request(worker, caf::infinite, forward_atom::value, batch)
            .then([self, id, reply_to](WireMessage& m) { self->send(reply_to, step_done_atom::value, id, std::move(m)); },
                  [self, id, reply_to](caf::error& e) { self->send(reply_to, step_failed_atom::value, id, e); });
      },
  };
}

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", double(d.count()) / 1000.0);
  return buf;
}

}  // namespace

ActorWorker::ActorWorker(caf::blocking_actor* self, caf::actor worker, WorkerLiveness liveness)
    : self_(self), worker_(std::move(worker)), liveness_(liveness) {
  if (!liveness_.heartbeats || liveness_.silence.count() == 0) relay_ = self_->system().spawn(step_relay, worker_);
  self_->monitor(worker_);
}

ActorWorker::~ActorWorker() {
  if (relay_) caf::anon_send_exit(relay_, caf::exit_reason::user_shutdown);
  // A worker this started is this one's to stop (the engine stops only the
  // one it spawned).
  if (restarts_ > 0) caf::anon_send_exit(worker_, caf::exit_reason::user_shutdown);
}

void ActorWorker::lose(std::string why) {
  if (!lost_.empty()) return;
  lost_ = std::move(why);
  // A worker of this process that is only stuck stops once its step
  // returns, instead of computing steps nobody waits for any more.
  if (worker_.node() == self_->node()) caf::anon_send_exit(worker_, caf::exit_reason::user_shutdown);
}

bool ActorWorker::on_down(const caf::down_msg& down) {
  if (down.source != worker_.address()) return false;
  ended(down.reason);
  return true;
}

void ActorWorker::ended(const caf::error& why) {
  const std::string reason = self_->system().render(why);
  const bool stopped = why == caf::make_error(caf::exit_reason::user_shutdown) || why == caf::make_error(caf::exit_reason::kill);
  if (!lost_.empty()) return;
  if (stopped || !liveness_.restart || restarts_ >= liveness_.max_restarts || worker_.node() != self_->node()) {
    lose("the worker stopped (" + reason + ")" +
         (restarts_ > 0 && !stopped ? " after " + std::to_string(restarts_) + " restarts" : ""));
    return;
  }
  worker_ = liveness_.restart();
  ++restarts_;
  self_->monitor(worker_);
  if (relay_) {
    caf::anon_send_exit(relay_, caf::exit_reason::user_shutdown);
    relay_ = self_->system().spawn(step_relay, worker_);
  }
  std::fprintf(stderr, "actorlm scheduler: the worker actor ended (%s); started again over the same weights and KV (%d of %d)\n",
               reason.c_str(), restarts_, liveness_.max_restarts);
}

void ActorWorker::wait_for_rejoin(const std::string& why) {
  std::fprintf(stderr, "actorlm scheduler: %s; waiting up to %s for the worker to come back\n", why.c_str(),
               seconds_text(liveness_.rejoin_wait).c_str());
  std::string failed;
  bool back = false;
  self_->request(worker_, liveness_.rejoin_wait, worker_back_atom::value)
      .receive([&](const WireMessage&) { back = true; }, [&](caf::error& e) { failed = self_->system().render(e); });
  if (!back) {
    lose(why + ", and it did not come back within " + seconds_text(liveness_.rejoin_wait) + " (" + failed + ")");
    throw WorkerLost("worker lost: " + lost_);
  }
  throw WorkerReset("the worker came back after it was lost (" + why + "): its KV is gone");
}

std::vector<SampleResult> ActorWorker::run(const ForwardBatch& batch, std::span<const SampleRequest> sampling) {
  if (!lost_.empty()) throw WorkerLost("worker lost: " + lost_);
  std::vector<uint64_t> ids(batch.reqs.size());
  std::iota(ids.begin(), ids.end(), 0);
  const uint64_t id = next_batch_++;
  std::vector<SampleRequest> s(sampling.begin(), sampling.end());
  const bool beats = liveness_.heartbeats && liveness_.silence.count() > 0;
  // Four beats per deadline: one late beat is no loss.
  const auto interval = static_cast<int32_t>(std::max<int64_t>(liveness_.silence.count() / 4, 1));
  const auto me = caf::actor_cast<caf::actor>(self_);
  WireMessage bytes{encode_forward(id, batch, ids, s)};
  if (beats) {
    // Straight to the worker, which answers with a message of its own:
    // the same two hops per step as a request.
    self_->send(worker_, forward_atom::value, id, std::move(bytes), me, interval);
  } else {
    self_->send(relay_, forward_atom::value, id, std::move(bytes), me);
  }
  // Measured on the steady clock (actors/silence.hpp): caf::after here runs
  // on the wall clock, so its firing only means "look again".
  Silence quiet(liveness_.silence);
  std::optional<WireMessage> out;
  std::optional<caf::error> failure;
  const int restarts_before = restarts_;
  while (!out && !failure && lost_.empty() && restarts_ == restarts_before) {
    bool looked = false;
    // caf::after needs a finite wait: without beats, a day at a time.
    const caf::duration wait =
        beats ? caf::duration(quiet.left()) : caf::duration(std::chrono::minutes(24 * 60));
    self_->receive(
        [&](step_done_atom, uint64_t got, WireMessage& m) {
          if (got == id) out = std::move(m);  // else a step given up on earlier: dropped
        },
        [&](step_failed_atom, uint64_t got, caf::error& why) {
          if (got == id) failure = std::move(why);
        },
        [&](heartbeat_atom, uint64_t) {},  // alive: wait on
        [&](caf::down_msg& down) { on_down(down); },
        caf::after(wait) >> [&] { looked = true; });
    if (!looked) {
      quiet.heard();
    } else if (beats && quiet.over()) {
      lose("no heartbeat or result from the worker for " + seconds_text(liveness_.silence));
    }
  }
  // The worker's actor gone with the request in its mailbox: as lost as a
  // down message says (which may come after this).
  if (failure && failure->category() == caf::atom("system") &&
      failure->code() == static_cast<uint8_t>(caf::sec::request_receiver_down) && restarts_ == restarts_before) {
    ended(*failure);
  }
  if (!lost_.empty()) throw WorkerLost("worker lost: " + lost_);
  if (failure && liveness_.rejoin_wait.count() > 0 && failure->category() == caf::atom("system") &&
      failure->code() == static_cast<uint8_t>(caf::sec::no_route_to_receiving_node)) {
    wait_for_rejoin(self_->system().render(*failure));
  }
  // Its requests run again on the new actor (the scheduler's supervision).
  if (restarts_ != restarts_before) throw std::runtime_error("the worker actor ended during this step and was started again");
  if (failure) throw std::runtime_error("worker unreachable: " + self_->system().render(*failure));
  std::string error;
  auto r = decode_result(out->bytes, &error);
  if (!r) throw std::runtime_error("worker sent an unreadable reply: " + error);
  if (!r->error.empty()) throw std::runtime_error("worker: " + r->error);
  if (r->batch_id != id || r->results.size() != batch.sampled_rows()) throw std::runtime_error("worker answered another batch");
  return std::move(r->results);
}

template <class Atom>
std::vector<uint8_t> ActorWorker::copy_rows(Atom atom, std::span<const int32_t> rows, int32_t first_layer,
                                            int32_t last_layer, std::span<const uint8_t> data) {
  if (!lost_.empty()) throw WorkerLost("worker lost: " + lost_);
  fb::KvRowsRequestT req;
  req.rows.assign(rows.begin(), rows.end());
  req.first_layer = first_layer;
  req.last_layer = last_layer;
  req.data.assign(data.begin(), data.end());
  std::vector<uint8_t> out;
  std::string failure;
  self_->request(worker_, liveness_.copy_timeout, atom, WireMessage{msg::pack(req)})
      .receive([&](WireMessage& reply) { out = std::move(reply.bytes); },
               [&](caf::error& err) { failure = self_->system().render(err); });
  if (!failure.empty()) throw std::runtime_error("worker unreachable: " + failure);
  auto r = msg::unpack<fb::KvRowsReply>(out, &failure);
  if (!r) throw std::runtime_error("worker sent an unreadable reply: " + failure);
  if (!r->error.empty()) throw std::runtime_error("worker: " + r->error);
  return std::move(r->data);
}

std::vector<uint8_t> ActorWorker::change_adapter(std::vector<uint8_t> change) {
  fb::AdapterReplyT failed;
  if (!lost_.empty()) {
    failed.error = "worker lost: " + lost_;
    return msg::pack(failed);
  }
  std::vector<uint8_t> out;
  std::string failure;
  self_->request(worker_, liveness_.copy_timeout, adapter_atom::value, WireMessage{std::move(change)})
      .receive([&](WireMessage& reply) { out = std::move(reply.bytes); },
               [&](caf::error& err) { failure = self_->system().render(err); });
  if (!failure.empty()) {
    failed.error = "worker unreachable: " + failure;
    return msg::pack(failed);
  }
  return out;
}

// A worker actor in this process takes the rows as they are (kv_read_raw,
// kv_write_raw): no envelope to pack, checksum and verify, which cost three
// passes over every byte and held a HiCache load of a 600-token prompt at
// 70-90 ms on the scheduler's thread. A worker node's link keeps the
// checked messages.
std::vector<uint8_t> ActorWorker::read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer) {
  if (worker_.node() != self_->node()) return copy_rows(kv_read_atom::value, rows, first_layer, last_layer, {});
  if (!lost_.empty()) throw WorkerLost("worker lost: " + lost_);
  std::vector<uint8_t> out;
  std::string failure;
  self_->request(worker_, liveness_.copy_timeout, kv_read_raw_atom::value, std::vector<int32_t>(rows.begin(), rows.end()),
                 first_layer, last_layer)
      .receive([&](std::vector<uint8_t>& d) { out = std::move(d); },
               [&](caf::error& err) { failure = self_->system().render(err); });
  if (!failure.empty()) throw std::runtime_error("worker: " + failure);
  return out;
}

void ActorWorker::write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                           std::span<const uint8_t> data) {
  if (worker_.node() != self_->node()) {
    copy_rows(kv_write_atom::value, rows, first_layer, last_layer, data);
    return;
  }
  if (!lost_.empty()) throw WorkerLost("worker lost: " + lost_);
  std::string failure;
  self_->request(worker_, liveness_.copy_timeout, kv_write_raw_atom::value, std::vector<int32_t>(rows.begin(), rows.end()),
                 first_layer, last_layer, std::vector<uint8_t>(data.begin(), data.end()))
      .receive([&](const std::string& error) { failure = error; },
               [&](caf::error& err) { failure = self_->system().render(err); });
  if (!failure.empty()) throw std::runtime_error("worker: " + failure);
}

}  // namespace actorlm
