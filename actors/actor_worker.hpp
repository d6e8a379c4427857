#pragma once
// Worker (scheduler/worker.hpp) over the worker actor: one ForwardBatch
// message per step, waited for as long as the worker lives.
//
// Why not a request timeout: a step's length is the model's business. A 3B
// model on two CPU threads takes minutes over a 4,096-token prefill, and a
// fixed timeout turned that into "worker unreachable" for every request in
// it (issue 32). A worker is lost only when
//   - its actor is down (the scheduler monitors it), or
//   - it asks for nothing and says nothing: with heartbeats on, the worker
//     beats every silence/4 while it computes (actors/heartbeat.hpp), and
//     `silence` without a beat or a result means the process or the worker
//     thread is gone (a stopped process, a hung device call).
// A lost worker fails that step and every later one with WorkerLost; the
// scheduler fails the requests as unavailable (HTTP 503) and /health says so.
//
// A worker actor of this process that ends (an exception its handler did
// not catch, an exit someone sent it) is started again instead, when the
// liveness has a `restart`: a new actor over the same ModelRunner, so its
// weights and KV pool are as they were after the last step it finished. The
// step it was running fails (a plain error, not WorkerLost), so the
// scheduler gives back that step's KV and runs its requests again
// (in-process supervision): no request is lost and none is computed twice
// into the stream. After `max_restarts` it is lost as before. A worker that
// is only silent is not restarted: its thread may still be inside the
// runner. Its own stop (user_shutdown, what the engine sends at exit) is
// never answered with a restart.
//
// With heartbeats the worker answers a step with a message of its own
// (actors/worker_actor.hpp), which a blocking receive can wait for together
// with beats and down messages; a CAF request's reply it could not. A
// worker without beats (a link to a worker node) speaks request/response
// only: a small relay actor holds that request and hands the outcome over
// as a message.
//
// Runs on a blocking actor (the scheduler's own, or a scoped_actor in tests).

#include <caf/actor.hpp>
#include <caf/blocking_actor.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "scheduler/worker.hpp"

namespace caf {
class down_msg;
}

namespace actorlm {

struct WorkerLiveness {
  // The worker actor beats during a step; a head's link to a worker node
  // does not (it fails the step itself when the node's connection goes).
  bool heartbeats = true;
  // With heartbeats: this long without a beat or a result and the worker is
  // lost. 0: never by silence (only by its actor going down).
  std::chrono::milliseconds silence{30'000};
  // KV row copies (read_kv / write_kv): bounded transfers, a plain timeout.
  std::chrono::milliseconds copy_timeout{120'000};
  // A new worker actor over the same runner (see above); empty: an ended
  // worker is lost.
  std::function<caf::actor()> restart{};
  int max_restarts = 3;
  // A worker that can come back (a head's link to a worker node, which
  // dials the node again): how long a step waits for it after the node was
  // lost. Back in time: the step throws WorkerReset (its KV is gone, the
  // scheduler computes its requests again); else it is lost. 0: a lost
  // node is lost for good.
  std::chrono::milliseconds rejoin_wait{0};
};

class ActorWorker final : public Worker {
 public:
  ActorWorker(caf::blocking_actor* self, caf::actor worker, WorkerLiveness liveness = {});
  ~ActorWorker() override;
  ActorWorker(const ActorWorker&) = delete;
  ActorWorker& operator=(const ActorWorker&) = delete;

  std::vector<SampleResult> run(const ForwardBatch& batch, std::span<const SampleRequest> sampling) override;
  std::vector<uint8_t> read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer) override;
  void write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                std::span<const uint8_t> data) override;

  // A LoRA adapter loaded into or dropped from the worker's runner
  // (AdapterChange -> AdapterReply, packed); the reply's error says why not.
  std::vector<uint8_t> change_adapter(std::vector<uint8_t> change);

  // Why the worker is lost for good; empty while it is not.
  const std::string& lost() const { return lost_; }
  // How many times an ended worker actor was started again.
  int restarts() const { return restarts_; }
  // A down message the owning actor received between steps: if it is the
  // worker's, the worker is lost. True when it was.
  bool on_down(const caf::down_msg& down);

 private:
  void lose(std::string why);
  // After a step the link failed because its node was lost: waits for the
  // node to be joined again and throws WorkerReset, or loses the worker and
  // throws WorkerLost.
  [[noreturn]] void wait_for_rejoin(const std::string& why);
  // The worker actor ended for `why`: started again if it may be, else lost.
  void ended(const caf::error& why);
  // One KvRowsRequest to the worker actor (kv_read_atom or kv_write_atom).
  template <class Atom>
  std::vector<uint8_t> copy_rows(Atom atom, std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                                 std::span<const uint8_t> data);

  caf::blocking_actor* self_;
  caf::actor worker_, relay_;
  WorkerLiveness liveness_;
  uint64_t next_batch_ = 1;
  std::string lost_;
  int restarts_ = 0;
};

}  // namespace actorlm
