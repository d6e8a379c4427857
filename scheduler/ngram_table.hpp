#pragma once
// Speculative decoding's memory across requests (--speculative-ngram-capacity;
// the n-gram drafter's second source beside the request's own text). What
// finished requests wrote is counted as "after these n tokens came token t";
// a request is drafted the continuation other requests most often had
// where a longer context of its last tokens matches here than its own text
// can, or where its own text has no match (Scheduler::draft_for). It pays
// where requests share structure without sharing a prompt: the same JSON
// keys, boilerplate, a template's fixed phrases, a question asked again.
//
// Bounded by `capacity` contexts: two generations, the older dropped whole
// when the newer fills (what was seen recently stays; no per-entry LRU
// bookkeeping on the scheduler's thread). Pure C++, the scheduler's thread.
//
// Text is kept per `space` (the scheduler's: a request's tenant): a request
// is drafted only what its own space's requests wrote, so tenants cannot
// learn each other's words from how fast theirs decode (docs/SECURITY.md).
// The bound is shared.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace actorlm {

class NgramTable {
 public:
  // Contexts of min_n..max_n tokens; at most `capacity` contexts held (each
  // ~64 bytes with the map's own), never fewer than 1.
  NgramTable(int32_t min_n, int32_t max_n, int64_t capacity);

  // Counts every continuation in `tokens` (a finished request's prompt ++
  // output) in `space`.
  void observe(std::span<const int32_t> tokens, uint64_t space = 0);
  // Up to max_tokens tokens after prompt ++ output, each the continuation
  // most often seen after the longest context that has one (of min_context
  // tokens or more; 0: min_n), while that continuation is more than half of
  // what followed the context; from `space`'s text only.
  std::vector<int32_t> draft(std::span<const int32_t> prompt, std::span<const int32_t> output, int32_t max_tokens,
                             int32_t min_context = 0, uint64_t space = 0) const;
  // Contexts held now (both generations).
  size_t size() const { return current_.size() + previous_.size(); }

 private:
  // The continuations seen after one context, the most frequent kept.
  struct Followers {
    static constexpr int kSlots = 4;
    int32_t token[kSlots] = {-1, -1, -1, -1};
    uint32_t count[kSlots] = {};
    void add(int32_t t);
  };
  using Map = std::unordered_map<uint64_t, Followers>;
  // The context's key in its space; collisions cost a wrong draft at worst
  // (verification rejects it), never a wrong token.
  static uint64_t key(std::span<const int32_t> context, uint64_t space);
  // The confident continuation of `context`, or -1.
  int32_t next(std::span<const int32_t> context, uint64_t space) const;

  int32_t min_n_, max_n_;
  size_t half_;  // contexts per generation
  Map current_, previous_;
};

}  // namespace actorlm
