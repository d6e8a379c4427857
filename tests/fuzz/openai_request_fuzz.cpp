// Fuzzes the OpenAI request parser with arbitrary request bodies.
// Contract under test: any body becomes a ParsedRequest or an ApiError; no
// exception escapes and the sanitizers stay quiet. Parsed numbers must lie in
// the ranges the parser promises, else the request would reach the engine
// with values it does not check again.
//
// Input: byte 0 picks the endpoint by (byte 0 >> 1) % 4: 0 chat (byte 0
// even) or completions (odd), 1 the native /generate, 2 /tokenize, 3
// /detokenize ('0' and '1' are chat and completions, '2' generate, '4'
// tokenize, '6' detokenize); the rest is the body.

#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/openai_api.hpp"

namespace {

void check_error(const actorlm::api::ApiError& error) {
  if (error.status < 400 || error.status > 499 || error.message.empty()) std::abort();
  (void)actorlm::api::dump(error.body());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int endpoint = (data[0] >> 1) % 4;
  const bool chat = endpoint == 0 && (data[0] & 1) == 0;
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (endpoint == 2) {
    auto result = actorlm::api::parse_tokenize_request(body);
    if (auto* e = std::get_if<actorlm::api::ApiError>(&result)) check_error(*e);
    return 0;
  }
  if (endpoint == 3) {
    auto result = actorlm::api::parse_detokenize_request(body);
    if (auto* e = std::get_if<actorlm::api::ApiError>(&result)) check_error(*e);
    return 0;
  }
  auto result = endpoint == 1 ? actorlm::api::parse_generate_request(body, "fuzz-model")
                              : actorlm::api::parse_request(body, chat, "fuzz-model");
  if (auto* parsed = std::get_if<actorlm::api::ParsedRequest>(&result)) {
    const auto& o = parsed->options;
    if (parsed->n < 1 || parsed->n > 16) std::abort();
    if (o.max_new_tokens < 1) std::abort();
    if (!(o.sampling.temperature >= 0 && o.sampling.temperature <= 2)) std::abort();
    if (chat && o.messages.empty()) std::abort();
  } else {
    check_error(std::get<actorlm::api::ApiError>(result));
  }
  return 0;
}
