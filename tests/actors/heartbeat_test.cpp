// The worker's heartbeat thread: beats while work runs, stops when it ends.

#include "actors/heartbeat.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

using namespace actorlm;
using namespace std::chrono_literals;

namespace {

// Waits up to `limit` for `count` to reach `want` (a liveness bound, not a
// speed measure).
bool reaches(const std::atomic<int>& count, int want, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (count.load() < want && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return count.load() >= want;
}

}  // namespace

TEST_CASE("A heartbeat beats while work runs and not after it ends", "[actors][heartbeat]") {
  std::atomic<int> beats{0};
  Heartbeat hb;
  hb.begin(5ms, [&] { ++beats; });
  CHECK(reaches(beats, 3, 5000ms));
  hb.end();
  // At most one beat may already be on its way when end() returns.
  const int at_end = beats.load();
  std::this_thread::sleep_for(50ms);
  CHECK(beats.load() <= at_end + 1);
  // It starts again for the next piece of work, with the new function.
  std::atomic<int> second{0};
  hb.begin(5ms, [&] { ++second; });
  CHECK(reaches(second, 2, 5000ms));
  hb.end();
}

TEST_CASE("A heartbeat never beats before its first interval", "[actors][heartbeat]") {
  std::atomic<int> beats{0};
  {
    Heartbeat hb;
    hb.begin(10min, [&] { ++beats; });
    std::this_thread::sleep_for(20ms);
    hb.end();
  }  // the destructor joins a waiting thread at once
  CHECK(beats.load() == 0);
}
