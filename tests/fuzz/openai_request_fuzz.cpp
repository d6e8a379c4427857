// Fuzzes the OpenAI request parser with arbitrary request bodies.
// Contract under test: any body becomes a ParsedRequest or an ApiError; no
// exception escapes and the sanitizers stay quiet. Parsed numbers must lie in
// the ranges the parser promises, else the request would reach the engine
// with values it does not check again.
//
// Input: byte 0 picks the endpoint (even: chat, odd: completions); the rest
// is the body.

#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/openai_api.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) == 0;
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto result = actorlm::api::parse_request(body, chat, "fuzz-model");
  if (auto* parsed = std::get_if<actorlm::api::ParsedRequest>(&result)) {
    const auto& o = parsed->options;
    if (parsed->n < 1 || parsed->n > 16) std::abort();
    if (o.max_new_tokens < 1) std::abort();
    if (!(o.sampling.temperature >= 0 && o.sampling.temperature <= 2)) std::abort();
    if (chat && o.messages.empty()) std::abort();
  } else {
    const auto& error = std::get<actorlm::api::ApiError>(result);
    if (error.status < 400 || error.status > 499 || error.message.empty()) std::abort();
    (void)actorlm::api::dump(error.body());
  }
  return 0;
}
