#include "scheduler/draft_cost.hpp"

#include <algorithm>
#include <cmath>

namespace actorlm {

void DraftCost::observe(int64_t rows, double seconds) {
  if (rows <= 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  constexpr double kDecay = 0.98;  // ~50 steps of memory
  const auto x = static_cast<double>(rows);
  n_ = n_ * kDecay + 1;
  x_ = x_ * kDecay + x;
  y_ = y_ * kDecay + seconds;
  xx_ = xx_ * kDecay + x * x;
  xy_ = xy_ * kDecay + x * seconds;
  ++steps_;
  if (rows >= kMaxRows) return;
  if (sizes_.size() <= static_cast<size_t>(rows)) sizes_.resize(static_cast<size_t>(rows) + 1);
  Size& s = sizes_[static_cast<size_t>(rows)];
  // A size not seen for a while starts again: the machine's load, or the
  // requests' lengths, may have changed since.
  constexpr double kWeight = 0.25;  // of the newest step
  s.seconds = s.seen < 0 || steps_ - s.seen > kStale ? seconds : s.seconds + kWeight * (seconds - s.seconds);
  s.seen = steps_;
}

bool DraftCost::fitted() const {
  // Steps of different sizes, or the slope means nothing.
  const double var = n_ * xx_ - x_ * x_;
  return n_ >= 8 && var > 0.5 * n_ * n_ && row_seconds() > 0 && fixed_seconds() >= 0;
}

double DraftCost::row_seconds() const {
  const double var = n_ * xx_ - x_ * x_;
  return var > 0 ? (n_ * xy_ - x_ * y_) / var : 0;
}

double DraftCost::fixed_seconds() const { return n_ > 0 ? (y_ - row_seconds() * x_) / n_ : 0; }

DraftCost::Points DraftCost::points() const {
  Points p;
  for (size_t r = 0; r < sizes_.size(); ++r) {
    if (sizes_[r].seen >= 0) p.emplace_back(static_cast<int64_t>(r), sizes_[r].seconds);
  }
  return p;
}

double DraftCost::at(const Points& p, int64_t rows) const {
  const auto hi = std::lower_bound(p.begin(), p.end(), rows, [](const auto& q, int64_t r) { return q.first < r; });
  if (hi != p.end() && hi->first == rows) return hi->second;
  if (hi != p.begin() && hi != p.end()) {
    const auto lo = std::prev(hi);
    const double f = static_cast<double>(rows - lo->first) / static_cast<double>(hi->first - lo->first);
    return lo->second + f * (hi->second - lo->second);
  }
  // Past the measured sizes: the line's slope, or the nearest two sizes'
  // (never negative) while the line is not fitted, or none with one size.
  const bool above = hi == p.end();
  const auto& edge = above ? p.back() : p.front();
  double slope = 0;
  if (fitted()) {
    slope = row_seconds();
  } else if (p.size() >= 2) {
    const auto& next = above ? p[p.size() - 2] : p[1];
    slope = std::max(0.0, (edge.second - next.second) / static_cast<double>(edge.first - next.first));
  }
  const double d = static_cast<double>(rows - edge.first);
  if (above) return edge.second + slope * d;
  // Fewer rows never cost less than their share of a measured step: a
  // step's fixed part only makes a row cheaper the more rows share it.
  return std::max(edge.second + slope * d, edge.second * static_cast<double>(rows) / static_cast<double>(edge.first));
}

std::optional<double> DraftCost::seconds(int64_t rows) const {
  const Points p = points();
  if (p.empty() || rows <= 0) return std::nullopt;
  return at(p, rows);
}

bool DraftCost::stale(int64_t rows) const {
  if (rows >= kMaxRows) return false;  // not kept by size: nothing to measure
  if (static_cast<size_t>(rows) >= sizes_.size()) return true;
  const Size& s = sizes_[static_cast<size_t>(rows)];
  return s.seen < 0 || steps_ - s.seen >= kStale;
}

std::vector<int32_t> DraftCost::allot(std::span<const int32_t> available, std::span<const double> rate,
                                      int64_t rows) {
  std::vector<int32_t> keep(available.begin(), available.end());
  const Points p = points();
  if (p.empty() || keep.empty()) return keep;
  // A probe: the sizes this step could take, with each request capped at j
  // drafts for j = 0 (plain decoding) up; the first not measured lately is
  // measured now. At once while one size is all that was measured: a curve
  // needs two.
  if (steps_ - last_probe_ >= kProbeEvery || p.size() == 1) {
    const int32_t most = *std::max_element(keep.begin(), keep.end());
    for (int32_t j = 0; j <= most; ++j) {
      int64_t size = rows;
      for (int32_t a : available) size += std::min(a, j);
      if (!stale(size)) continue;
      last_probe_ = steps_;
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = std::min(available[i], j);
      return keep;
    }
  }
  // Every candidate row with its chance: the j-th draft of request i is
  // kept with about rate[i]^j. Best chances first; within a request they
  // fall with j, so any prefix of this order is each request's first
  // drafts. The prefix with the most expected tokens a second wins.
  struct Row {
    double chance;
    size_t request;
  };
  std::vector<Row> rows_by_chance;
  for (size_t i = 0; i < available.size(); ++i) {
    double q = 1;
    for (int32_t j = 0; j < available[i]; ++j) rows_by_chance.push_back({q *= rate[i], i});
  }
  std::stable_sort(rows_by_chance.begin(), rows_by_chance.end(),
                   [](const Row& a, const Row& b) { return a.chance > b.chance; });
  double tokens = static_cast<double>(rows);
  double best = tokens / at(p, rows);
  size_t taken = 0;
  for (size_t k = 0; k < rows_by_chance.size(); ++k) {
    tokens += rows_by_chance[k].chance;
    const double yield = tokens / at(p, rows + static_cast<int64_t>(k) + 1);
    if (yield > best) {
      best = yield;
      taken = k + 1;
    }
  }
  std::fill(keep.begin(), keep.end(), 0);
  for (size_t k = 0; k < taken; ++k) ++keep[rows_by_chance[k].request];
  return keep;
}

}  // namespace actorlm
