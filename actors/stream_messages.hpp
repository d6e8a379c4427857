#pragma once
// Building and reading the messages that carry generated tokens towards a
// client (TokenStream from a scheduler, TextDelta to a client), shared by the
// local engine, the head's router and a node's gateway.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/envelope.hpp"
#include "scheduler/scheduler.hpp"

namespace actorlm {

fb::FinishReason to_fb(FinishReason r);
FinishReason from_fb(fb::FinishReason r);
fb::ErrorKind to_fb(ErrorKind k);
ErrorKind from_fb(fb::ErrorKind k);

// A TextDelta that ends request `id` with `error`.
std::vector<uint8_t> error_delta(uint64_t id, ErrorKind kind, const std::string& error);
// One TokenStream for a scheduler step's events.
std::vector<uint8_t> token_stream(const std::vector<TokenEvent>& events);
// A TokenStream that ends every request in `ids` with `error` (a lost node).
std::vector<uint8_t> error_stream(const std::vector<uint64_t>& ids, ErrorKind kind, const std::string& error);

}  // namespace actorlm
