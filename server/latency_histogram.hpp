#pragma once
// A Prometheus histogram of latencies in seconds (time to first token,
// inter-token latency): cumulative bucket counts, sum and count, safe to
// observe from many threads at once.

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace actorlm {

class LatencyHistogram {
 public:
  // upper_bounds: increasing bucket bounds in seconds (+Inf is implied).
  LatencyHistogram(std::string name, std::string help, std::vector<double> upper_bounds);

  void observe(double seconds);
  // "# HELP", "# TYPE" and the _bucket / _sum / _count lines.
  std::string exposition() const;

 private:
  std::string name_, help_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace actorlm
