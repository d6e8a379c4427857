#pragma once
// Helpers shared by the manager actors' message handlers.

#include <cstdint>
#include <vector>

#include "actors/wire.hpp"
#include "messages/envelope.hpp"

namespace actorlm {

// Opens `in` as a T message and returns f(message); empty bytes when it does
// not verify (the caller answers with an error reply).
template <class T, class F>
std::vector<uint8_t> with_message(const WireMessage& in, F&& f) {
  auto opened = msg::open<T>(in.bytes);
  if (!opened) return {};
  return f(*opened.message);
}

// A FlatBuffers int vector (possibly absent) as a std::vector<int32_t>.
inline std::vector<int32_t> to_ints(const flatbuffers::Vector<int32_t>* v) {
  return v ? std::vector<int32_t>(v->begin(), v->end()) : std::vector<int32_t>{};
}

}  // namespace actorlm
