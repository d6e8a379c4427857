#include "scheduler/ngram_table.hpp"

#include <algorithm>

namespace actorlm {

NgramTable::NgramTable(int32_t min_n, int32_t max_n, int64_t capacity)
    : min_n_(std::max(min_n, 1)),
      max_n_(std::max(max_n, std::max(min_n, 1))),
      half_(static_cast<size_t>(std::max<int64_t>(capacity / 2, 1))) {}

void NgramTable::Followers::add(int32_t t) {
  int low = 0;
  for (int i = 0; i < kSlots; ++i) {
    if (token[i] == t) {
      ++count[i];
      return;
    }
    if (count[i] < count[low]) low = i;
  }
  // A new continuation takes an empty slot, or the rarest one's: what was
  // seen once long ago yields to what is seen now.
  token[low] = t;
  count[low] = 1;
}

uint64_t NgramTable::key(std::span<const int32_t> context, uint64_t space) {
  uint64_t h = 0x9e3779b97f4a7c15ull * (context.size() + 1) ^ (space * 0xd6e8feb86659fd93ull);
  for (int32_t t : context) {
    h ^= static_cast<uint32_t>(t);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}

void NgramTable::observe(std::span<const int32_t> tokens, uint64_t space) {
  for (size_t i = 1; i < tokens.size(); ++i) {
    for (int32_t n = min_n_; n <= max_n_ && static_cast<size_t>(n) <= i; ++n) {
      const uint64_t k = key(tokens.subspan(i - static_cast<size_t>(n), static_cast<size_t>(n)), space);
      auto it = current_.find(k);
      if (it == current_.end()) {
        if (current_.size() >= half_) {
          // The newer generation is full: the older goes whole.
          previous_ = std::move(current_);
          current_ = Map();
        }
        // A context the older generation holds carries its counts over.
        auto old = previous_.find(k);
        it = current_.emplace(k, old != previous_.end() ? old->second : Followers{}).first;
        if (old != previous_.end()) previous_.erase(old);
      }
      it->second.add(tokens[i]);
    }
  }
}

int32_t NgramTable::next(std::span<const int32_t> context, uint64_t space) const {
  const uint64_t k = key(context, space);
  auto it = current_.find(k);
  if (it == current_.end()) {
    it = previous_.find(k);
    if (it == previous_.end()) return -1;
  }
  const Followers& f = it->second;
  uint64_t total = 0;
  int best = 0;
  for (int i = 0; i < Followers::kSlots; ++i) {
    total += f.count[i];
    if (f.count[i] > f.count[best]) best = i;
  }
  return f.token[best] >= 0 && 2 * uint64_t{f.count[best]} > total ? f.token[best] : -1;
}

std::vector<int32_t> NgramTable::draft(std::span<const int32_t> prompt, std::span<const int32_t> output,
                                       int32_t max_tokens, int32_t min_context, uint64_t space) const {
  const int32_t least = std::max(min_n_, min_context);
  std::vector<int32_t> out;
  if (max_tokens <= 0 || (current_.empty() && previous_.empty())) return out;
  // The last max_n tokens of prompt ++ output, then the draft after them.
  std::vector<int32_t> ctx;
  const size_t want = static_cast<size_t>(max_n_);
  const size_t from_output = std::min(output.size(), want);
  const size_t from_prompt = std::min(prompt.size(), want - from_output);
  ctx.insert(ctx.end(), prompt.end() - static_cast<std::ptrdiff_t>(from_prompt), prompt.end());
  ctx.insert(ctx.end(), output.end() - static_cast<std::ptrdiff_t>(from_output), output.end());
  while (out.size() < static_cast<size_t>(max_tokens)) {
    int32_t t = -1;
    for (int32_t n = std::min<int32_t>(max_n_, static_cast<int32_t>(ctx.size())); n >= least && t < 0; --n) {
      t = next(std::span<const int32_t>(ctx).last(static_cast<size_t>(n)), space);
    }
    if (t < 0) break;
    out.push_back(t);
    ctx.push_back(t);
  }
  return out;
}

}  // namespace actorlm
