#include "actors/worker_actor.hpp"

#include <caf/all.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "actors/forward_codec.hpp"
#include "actors/heartbeat.hpp"
#include "actors/local_sender.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"
#include "model/model_fingerprint.hpp"

namespace actorlm {
namespace {

// ACTORLM_TEST_ONLY_WORKER_FAULT (see the header).
struct TestFault {
  enum class Kind { none, hang, exit, crash, fail, poison } kind = Kind::none;
  int64_t at_forward = 0;  // hang, exit, crash, fail: the forward; poison: the token id
  // Whether forward number n (1-based) of `batch` throws.
  bool throws(const ForwardBatch& batch, int64_t n) const {
    if (kind == Kind::fail) return n == at_forward;
    return kind == Kind::poison &&
           std::find(batch.token_ids.begin(), batch.token_ids.end(), static_cast<int32_t>(at_forward)) != batch.token_ids.end();
  }
};

TestFault test_fault_from_env() {
  const char* v = std::getenv("ACTORLM_TEST_ONLY_WORKER_FAULT");
  if (!v) return {};
  const std::string s(v);
  const auto at = s.find('@');
  TestFault f;
  if (at != std::string::npos) f.at_forward = std::strtoll(s.c_str() + at + 1, nullptr, 10);
  const std::string kind = s.substr(0, at);
  f.kind = kind == "hang"     ? TestFault::Kind::hang
           : kind == "exit"   ? TestFault::Kind::exit
           : kind == "crash"  ? TestFault::Kind::crash
           : kind == "throw"  ? TestFault::Kind::fail
           : kind == "poison" ? TestFault::Kind::poison
                              : TestFault::Kind::none;
  if (f.kind == TestFault::Kind::none || f.at_forward < (f.kind == TestFault::Kind::poison ? 0 : 1)) {
    std::fprintf(stderr, "actorlm worker: ignoring ACTORLM_TEST_ONLY_WORKER_FAULT=%s (want hang@N, exit@N, crash@N, throw@N or poison@TOKEN)\n", v);
    return {};
  }
  std::fprintf(stderr, "actorlm worker: TEST FAULT armed: %s\n", v);
  return f;
}

struct WorkerState {
  std::shared_ptr<ModelRunner> runner;
  // Declared after the runner: destroyed (joined) first, so no beat
  // outlives what it reports on.
  std::unique_ptr<Heartbeat> heartbeat;
  TestFault fault;
  int64_t forwards = 0;
  static inline const char* name = "actorlm.worker";
};

WireMessage run_batch(ModelRunner& runner, const WireMessage& in, const TestFault& fault = {}, int64_t forward = 0) {
  std::string error;
  auto decoded = decode_forward(in.bytes, &error);
  if (!decoded) return {encode_result(0, {}, {}, {}, 0, "rejected forward batch: " + error)};
  auto t0 = std::chrono::steady_clock::now();
  try {
    if (fault.throws(decoded->batch, forward)) throw std::runtime_error("TEST FAULT: forward " + std::to_string(forward) + " throws");
    std::vector<SampleResult> results = runner.step(std::move(decoded->batch), std::move(decoded->sampling));
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

// A LoRA adapter loaded from its file into the runner, or dropped from it,
// between two batches.
WireMessage change_adapter(ModelRunner& runner, const WireMessage& in) {
  fb::AdapterReplyT reply;
  auto opened = msg::open<fb::AdapterChange>(in.bytes);
  if (!opened) {
    reply.error = "rejected adapter change: " + opened.error;
    return {msg::pack(reply)};
  }
  const fb::AdapterChange& q = *opened.message;
  try {
    if (!q.load()) {
      runner.drop_adapter(q.id());
    } else {
      const LoraAdapter adapter = load_lora_adapter(q.path() ? q.path()->str() : "", runner.model_config(), q.scale());
      if (adapter.bytes() > q.max_bytes()) {
        reply.error = "the adapter takes " + std::to_string(adapter.bytes() / 1000000) + " MB, more than the " +
                      std::to_string(q.max_bytes() / 1000000) + " MB left of --max-lora-memory-mb";
        return {msg::pack(reply)};
      }
      // What the scheduler names the adapter's KV by in the tiers below the
      // pool (kv_adapter_lineage), which outlive this process and its ids.
      // Before the adapter is added: a file that cannot be read is an error
      // with nothing loaded.
      reply.fingerprint = model_fingerprint(q.path() ? q.path()->str() : "");
      runner.add_adapter(q.id(), adapter);
      reply.bytes = adapter.bytes();
      reply.matrices = adapter.matrices();
    }
  } catch (const std::exception& e) {
    reply.error = e.what();
  }
  return {msg::pack(reply)};
}

caf::behavior worker(caf::stateful_actor<WorkerState>* self, std::shared_ptr<ModelRunner> runner) {
  self->state.runner = std::move(runner);
  self->state.fault = test_fault_from_env();
  return {
      [self](forward_atom, const WireMessage& in) -> WireMessage { return run_batch(*self->state.runner, in); },
      [self](forward_atom, uint64_t id, const WireMessage& in, const caf::actor& reply_to, int32_t interval_ms) {
        auto& st = self->state;
        ++st.forwards;
        // crash@N: only the process's first worker actor (a restarted one goes on).
        static std::atomic<bool> crashed{false};
        const bool crash = st.fault.kind == TestFault::Kind::crash && st.forwards == st.fault.at_forward && !crashed.exchange(true);
        const bool stops = st.fault.kind == TestFault::Kind::hang || st.fault.kind == TestFault::Kind::exit;
        if (crash || (stops && st.forwards == st.fault.at_forward)) {
          if (crash || st.fault.kind == TestFault::Kind::exit) {
            std::fprintf(stderr, "actorlm worker: TEST FAULT: ending at forward %lld\n",
                         static_cast<long long>(st.forwards));
            // As an exception escaping a handler ends an actor (a user
            // shutdown would be taken for the engine's own stop).
            return self->quit(caf::exit_reason::unhandled_exception);
          }
          std::fprintf(stderr, "actorlm worker: TEST FAULT: silent from forward %lld\n",
                       static_cast<long long>(st.forwards));
          std::this_thread::sleep_for(std::chrono::hours(1));
        }
        if (!st.heartbeat) st.heartbeat = std::make_unique<Heartbeat>();
        Heartbeat& hb = *st.heartbeat;
        const auto interval = std::chrono::milliseconds(std::max(interval_ms, 1));
        hb.begin(interval, [reply_to, id] { caf::anon_send(reply_to, heartbeat_atom::value, id); });
        WireMessage out = run_batch(*st.runner, in, st.fault, st.forwards);
        hb.end();
        self->send(reply_to, step_done_atom::value, id, std::move(out));
      },
      [self](kv_read_atom, const WireMessage& in) -> WireMessage { return copy_kv(*self->state.runner, in, false); },
      // A path to read: only from this process, never from a peer.
      [self](adapter_atom, const WireMessage& in) -> WireMessage {
        if (!from_this_process(self)) {
          fb::AdapterReplyT reply;
          reply.error = "adapters are loaded only by the worker's own process";
          return {msg::pack(reply)};
        }
        return change_adapter(*self->state.runner, in);
      },
      [self](kv_write_atom, const WireMessage& in) -> WireMessage { return copy_kv(*self->state.runner, in, true); },
      // The same for a data plane in this process (cluster/transfer/
      // kv_data_plane.hpp): the bytes as they are, no envelope to pack and
      // check. Only from this process: a peer never names rows here.
      [self](kv_read_raw_atom, const std::vector<int32_t>& rows, int32_t first_layer,
             int32_t last_layer) -> caf::result<std::vector<uint8_t>> {
        if (!from_this_process(self)) return caf::sec::unexpected_message;
        try {
          return self->state.runner->read_kv(rows, first_layer, last_layer);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
      },
      [self](kv_write_raw_atom, const std::vector<int32_t>& rows, int32_t first_layer, int32_t last_layer,
             const std::vector<uint8_t>& data) -> std::string {
        if (!from_this_process(self)) return "not from this process";
        try {
          self->state.runner->write_kv(rows, first_layer, last_layer, data);
        } catch (const std::exception& e) {
          return e.what();
        }
        return "";
      },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& system, std::shared_ptr<ModelRunner> runner) {
  return system.spawn<caf::detached>(worker, std::move(runner));
}

}  // namespace actorlm
