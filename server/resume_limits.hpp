#pragma once
// How long, and how much of, a streamed response is kept for a client that
// lost its connection and comes back with Last-Event-ID (stream_journal.hpp).

#include <chrono>
#include <cstddef>

namespace actorlm {

struct ResumeLimits {
  std::chrono::milliseconds window{0};  // 0: no stream can be resumed (no ids, no journal)
  size_t max_stream_bytes = 4u << 20;   // events kept per stream; the oldest go first
  size_t max_total_bytes = 256u << 20;  // over all streams; past it new streams are not kept
};

}  // namespace actorlm
