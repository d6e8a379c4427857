#include "server/latency_histogram.hpp"

#include <algorithm>
#include <cstdio>

namespace actorlm {

LatencyHistogram::LatencyHistogram(std::string name, std::string help, std::vector<double> upper_bounds)
    : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void LatencyHistogram::observe(double seconds) {
  auto at = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[at];
  sum_ += seconds;
  ++count_;
}

std::string LatencyHistogram::exposition() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "# HELP " + name_ + " " + help_ + "\n# TYPE " + name_ + " histogram\n";
  uint64_t cumulative = 0;
  char line[160];
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    if (i < bounds_.size()) {
      std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name_.c_str(), bounds_[i],
                    static_cast<unsigned long long>(cumulative));
    } else {
      std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name_.c_str(),
                    static_cast<unsigned long long>(cumulative));
    }
    out += line;
  }
  std::snprintf(line, sizeof line, "%s_sum %.6f\n%s_count %llu\n", name_.c_str(), sum_, name_.c_str(),
                static_cast<unsigned long long>(count_));
  return out + line;
}

}  // namespace actorlm
