#pragma once
// How long a blocking actor has heard nothing, on the steady clock.
//
// CAF 0.17's blocking receive times out on the wall clock: blocking_actor's
// timeout_type is high_resolution_clock, which libstdc++ makes system_clock,
// and the wait ends at that clock's deadline. A wall clock stepped forward
// (NTP, a virtual machine resumed) ends every such wait at once: a CI run
// saw two engines report a worker "silent for 30 s" inside a test that ran
// 29 s in all. So a `caf::after` here only says when to look again; whether
// the limit has passed is read from the steady clock, and a wait that ended
// early costs one more wait for what is left. (A wall clock stepped back
// makes one wait longer by the step: late, never wrong.)
// No CAF here; the clock is a parameter so that the rules can be tested.

#include <algorithm>
#include <chrono>

namespace actorlm {

class Silence {
 public:
  using clock = std::chrono::steady_clock;

  explicit Silence(std::chrono::milliseconds limit, clock::time_point now = clock::now()) : limit_(limit), since_(now) {}

  // Something was heard: the silence starts again.
  void heard(clock::time_point now = clock::now()) { since_ = now; }

  // The limit has passed since the last thing heard (or the start).
  bool over(clock::time_point now = clock::now()) const { return now - since_ >= limit_; }

  // How long to wait before looking again: what is left of the limit, at
  // least 1 ms (a caf::after of 0 would poll).
  std::chrono::milliseconds left(clock::time_point now = clock::now()) const {
    const auto gone = std::chrono::duration_cast<std::chrono::milliseconds>(now - since_);
    return std::max(limit_ - gone, std::chrono::milliseconds(1));
  }

 private:
  std::chrono::milliseconds limit_;
  clock::time_point since_;
};

}  // namespace actorlm
