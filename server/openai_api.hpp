#pragma once
// OpenAI-compatible request parsing and response formatting (JSON only, no
// HTTP). Every number from a client is range-checked; a bad request becomes
// an ApiError carrying the HTTP status and OpenAI's error object.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

#include "actors/engine.hpp"

namespace actorlm::api {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, if any
  nlohmann::json body() const;
};

struct ParsedRequest {
  GenerateOptions options;
  bool stream = false;
  bool include_usage = false;
  bool chat = true;
  int n = 1;  // choices; choice i samples with seed + i when a seed is given
};

// kind: "chat" (/v1/chat/completions) or "completion" (/v1/completions).
std::variant<ParsedRequest, ApiError> parse_request(const std::string& body, bool chat, const std::string& model_id);

std::string finish_reason_text(FinishReason r);

// One finished choice.
struct ChoiceResult {
  std::string text;
  TextDeltaEvent last;
  std::vector<TokenLogprobInfo> logprobs;
};

// OpenAI's logprobs object for some tokens: chat's {"content": [...]} or
// completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
// (offsets counted from text_offset).
nlohmann::json logprobs_json(bool chat, const std::vector<TokenLogprobInfo>& tokens, size_t text_offset);

// with_logprobs: whether the request asked for them (else "logprobs": null).
nlohmann::json completion_response(const std::string& id, const std::string& model, bool chat,
                                   const std::vector<ChoiceResult>& choices, bool with_logprobs, int64_t created);
// One SSE chunk ("data: {...}\n\n") for choice `index`.
std::string stream_chunk(const std::string& id, const std::string& model, bool chat, int index, const std::string& text,
                         const std::optional<FinishReason>& finish, int64_t created, bool first,
                         const nlohmann::json& logprobs);
std::string usage_chunk(const std::string& id, const std::string& model, bool chat, int32_t prompt_tokens,
                        int32_t completion_tokens, int64_t created);

// JSON text for the wire: invalid UTF-8 (a token piece that splits a
// character) becomes U+FFFD instead of an exception.
std::string dump(const nlohmann::json& j);

}  // namespace actorlm::api
