#include "actors/worker_actor.hpp"

#include <caf/all.hpp>
#include <chrono>

#include "actors/forward_codec.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"

namespace actorlm {
namespace {

struct WorkerState {
  std::shared_ptr<ModelRunner> runner;
  static inline const char* name = "actorlm.worker";
};

WireMessage run_batch(ModelRunner& runner, const WireMessage& in) {
  std::string error;
  auto decoded = decode_forward(in.bytes, &error);
  if (!decoded) return {encode_result(0, {}, {}, {}, 0, "rejected forward batch: " + error)};
  auto t0 = std::chrono::steady_clock::now();
  try {
    ForwardOutput out = runner.forward(decoded->batch);
    std::vector<SampleResult> results = runner.sample(out, decoded->sampling);
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    return {encode_result(decoded->batch_id, decoded->request_ids, results, decoded->sample, us, "")};
  } catch (const std::exception& e) {
    return {encode_result(decoded->batch_id, decoded->request_ids, {}, {}, 0, e.what())};
  }
}

// KV rows out of (write: into) the pool, for a transfer to another engine.
WireMessage copy_kv(ModelRunner& runner, const WireMessage& in, bool write) {
  fb::KvRowsReplyT reply;
  auto opened = msg::open<fb::KvRowsRequest>(in.bytes);
  if (!opened) {
    reply.error = "rejected KV rows request: " + opened.error;
    return {msg::pack(reply)};
  }
  const fb::KvRowsRequest& q = *opened.message;
  std::vector<int32_t> rows = q.rows() ? std::vector<int32_t>(q.rows()->begin(), q.rows()->end()) : std::vector<int32_t>{};
  try {
    if (write) {
      std::span<const uint8_t> data = q.data() ? std::span<const uint8_t>(q.data()->data(), q.data()->size())
                                               : std::span<const uint8_t>();
      runner.write_kv(rows, q.first_layer(), q.last_layer(), data);
    } else {
      reply.data = runner.read_kv(rows, q.first_layer(), q.last_layer());
    }
  } catch (const std::exception& e) {
    reply.error = e.what();
  }
  return {msg::pack(reply)};
}

caf::behavior worker(caf::stateful_actor<WorkerState>* self, std::shared_ptr<ModelRunner> runner) {
  self->state.runner = std::move(runner);
  return {
      [self](forward_atom, const WireMessage& in) -> WireMessage { return run_batch(*self->state.runner, in); },
      [self](kv_read_atom, const WireMessage& in) -> WireMessage { return copy_kv(*self->state.runner, in, false); },
      [self](kv_write_atom, const WireMessage& in) -> WireMessage { return copy_kv(*self->state.runner, in, true); },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& system, std::shared_ptr<ModelRunner> runner) {
  return system.spawn<caf::detached>(worker, std::move(runner));
}

}  // namespace actorlm
