// The worker's layer clock (model/kv_layer_clock.hpp) as a transfer's
// thread reads it: a step's layers are ready as they are stored, every
// layer of a step that ended is ready, a later step is not ready early; and
// a real forward pass ticks once per layer, ending its step even when it
// throws.

#include "model/kv_layer_clock.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/model_runner.hpp"

namespace actorlm {
namespace {

using std::chrono::milliseconds;

TEST_CASE("A step's layers are ready as they are stored, an ended step's all, a later step's none", "[kv_layer_clock]") {
  KvLayerClock clock;
  CHECK_FALSE(clock.wait(1, 1, milliseconds(0)));
  clock.begin(1);
  CHECK_FALSE(clock.wait(1, 1, milliseconds(0)));
  clock.stored(1);
  clock.stored(2);
  CHECK(clock.wait(1, 2, milliseconds(0)));
  CHECK_FALSE(clock.wait(1, 3, milliseconds(0)));
  CHECK_FALSE(clock.wait(2, 1, milliseconds(0)));  // the next step's first layer is not this one's
  clock.end(1);
  CHECK(clock.wait(1, 30, milliseconds(0)));
  clock.begin(2);
  CHECK(clock.wait(1, 30, milliseconds(0)));  // stays readable
  CHECK_FALSE(clock.wait(2, 1, milliseconds(0)));
  clock.end(3);  // a step that ran without telling its layers (a device's) ends every one before it
  CHECK(clock.wait(2, 30, milliseconds(0)));
  CHECK(clock.wait(3, 30, milliseconds(0)));
  CHECK(clock.layers_reported() == 2);
}

TEST_CASE("A reader waiting on a layer wakes when the worker stores it", "[kv_layer_clock]") {
  KvLayerClock clock;
  clock.begin(5);
  std::thread worker([&] {
    std::this_thread::sleep_for(milliseconds(50));
    clock.stored(1);
    std::this_thread::sleep_for(milliseconds(50));
    clock.stored(2);
  });
  CHECK(clock.wait(5, 2, std::chrono::seconds(30)));
  worker.join();
  CHECK_FALSE(clock.wait(5, 3, milliseconds(10)));  // timed out: false
}

TEST_CASE("A forward pass with a step number ticks each layer once and ends its step", "[kv_layer_clock]") {
  ModelRunner runner(load_llama_weights(default_model_path()), std::make_unique<cpu::CpuBackend>(1),
                     {.kv_pool_rows = 64, .max_requests = 2, .max_context = 64});
  auto clock = std::make_shared<KvLayerClock>();
  runner.set_kv_clock(clock);
  const int32_t layers = runner.model_config().n_layers;
  ForwardBatch b;
  b.reqs.push_back({0, 0, 4});
  b.token_ids = {1, 2, 3, 4};
  b.out_cache_loc = {1, 2, 3, 4};
  b.writes.push_back({0, 0, {1, 2, 3, 4}});
  b.step = 9;
  runner.forward(b);
  CHECK(clock->layers_reported() == layers);
  CHECK(clock->wait(9, layers, milliseconds(0)));
  CHECK_FALSE(clock->wait(10, 1, milliseconds(0)));
  // Without a step number nothing is told.
  b.step = 0;
  runner.forward(b);
  CHECK(clock->layers_reported() == layers);
  // A refused batch still ends its step: nobody waits on it forever.
  ForwardBatch bad = b;
  bad.step = 11;
  bad.out_cache_loc.push_back(0);  // one row more than tokens
  CHECK_THROWS(runner.forward(bad));
  CHECK(clock->wait(11, layers, milliseconds(0)));
}

}  // namespace
}  // namespace actorlm
