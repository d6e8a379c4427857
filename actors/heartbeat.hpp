#pragma once
// A thread that calls `beat` every `interval` while one piece of work runs
// (between begin() and end()). The worker actor blocks for a whole forward
// pass, so it cannot answer messages meanwhile; this thread says for it that
// the process and the worker are still there, so that a slow step is told
// apart from a dead worker by silence, never by how long the step takes.
// No CAF here: `beat` does the sending. One thread per Heartbeat, started at
// the first begin() and joined by the destructor.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace actorlm {

class Heartbeat {
 public:
  Heartbeat() = default;
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Beats from `interval` after now until end(), between 1 and 1.5
  // intervals apart. `beat` runs on the heartbeat thread, never under the
  // lock, and may run once more just after end() returns (a receiver drops
  // beats it no longer waits for).
  void begin(std::chrono::milliseconds interval, std::function<void()> beat);
  void end();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::function<void()> beat_;
  std::chrono::milliseconds interval_{1000};
  std::chrono::steady_clock::time_point since_;  // the last beat, or begin()
  bool active_ = false, stop_ = false;
};

}  // namespace actorlm
