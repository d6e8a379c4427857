#pragma once
// How many draft rows a decode step should carry, from what steps of each
// size have cost on this machine and model. Pure C++, the scheduler's thread.

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace actorlm {

// A step's cost is not a straight line in its rows: float32 products of up
// to 32 rows read each weight once and larger ones go through sgemm, a draft
// model adds a pass per drafted position, and at 8 streams a verify of 40
// rows cost 4.8 plain steps on a Zen 3 VM, so drafts kept 96% of the time
// still lost to plain decoding. So each step size's time is kept on its own
// (an average over the recent steps of that size), sizes not seen are read
// off their measured neighbours, and a step carries the drafts that give the
// most expected tokens per second by that curve: plain decoding included,
// so speculation is never chosen where the measurements say it loses.
//
// The sizes a step could take (each request capped at j drafts, for every
// j) are measured again when they have not been seen for a while: one step
// in kProbeEvery runs such a cap instead of the chosen drafts.
class DraftCost {
 public:
  static constexpr int64_t kProbeEvery = 16;  // steps between probes
  static constexpr int64_t kStale = 256;      // a size not seen for this many steps is measured again
  static constexpr int64_t kMaxRows = 4096;   // larger steps are timed in the line only

  // A step that decoded `rows` rows (drafts included) and nothing else.
  void observe(int64_t rows, double seconds);
  // How many of each request's drafts to keep: available[i] drafted for a
  // request whose next draft token is kept with chance rate[i], beside
  // `rows` rows the step has anyway. Before any step is measured,
  // everything (the steps it measures are how it learns). Counts probes.
  std::vector<int32_t> allot(std::span<const int32_t> available, std::span<const double> rate, int64_t rows);
  // A step of `rows` rows' expected seconds: measured at that size, else
  // between the nearest measured sizes, else past them along the line;
  // nothing before the first step.
  std::optional<double> seconds(int64_t rows) const;

  // The straight line fitted to every step (fixed + per row), once steps of
  // several sizes make one.
  bool fitted() const;
  double fixed_seconds() const;
  double row_seconds() const;

 private:
  struct Size {
    double seconds = 0;
    int64_t seen = -1;  // the observation that last timed it; -1: never
  };
  using Points = std::vector<std::pair<int64_t, double>>;  // (rows, seconds), by rows
  Points points() const;
  double at(const Points& points, int64_t rows) const;
  bool stale(int64_t rows) const;

  std::vector<Size> sizes_;  // by rows
  int64_t steps_ = 0;        // observations so far
  int64_t last_probe_ = 0;
  // Exponentially weighted sums for the least-squares line.
  double n_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;
};

}  // namespace actorlm
