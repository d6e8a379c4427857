// The steady-clock silence behind the worker's liveness and the engine's
// stall timeout (actors/silence.hpp).

#include "actors/silence.hpp"

#include <catch2/catch.hpp>

using namespace actorlm;
using namespace std::chrono_literals;

TEST_CASE("A silence is over only when the limit has passed on the steady clock", "[actors][silence]") {
  const Silence::clock::time_point t0{};
  Silence quiet(30'000ms, t0);
  CHECK_FALSE(quiet.over(t0));
  CHECK(quiet.left(t0) == 30'000ms);
  // A wait that the wall clock ended early (1 s in): not over, and the next
  // wait is for what is left.
  CHECK_FALSE(quiet.over(t0 + 1s));
  CHECK(quiet.left(t0 + 1s) == 29'000ms);
  CHECK_FALSE(quiet.over(t0 + 29'999ms));
  CHECK(quiet.over(t0 + 30s));
  CHECK(quiet.left(t0 + 30s) == 1ms);  // never a wait of 0
  CHECK(quiet.left(t0 + 60s) == 1ms);
}

TEST_CASE("Hearing something starts the silence again", "[actors][silence]") {
  const Silence::clock::time_point t0{};
  Silence quiet(10s, t0);
  quiet.heard(t0 + 9s);
  CHECK_FALSE(quiet.over(t0 + 18s));
  CHECK(quiet.left(t0 + 18s) == 1'000ms);
  CHECK(quiet.over(t0 + 19s));
}
