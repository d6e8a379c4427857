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
};

// kind: "chat" (/v1/chat/completions) or "completion" (/v1/completions).
std::variant<ParsedRequest, ApiError> parse_request(const std::string& body, bool chat, const std::string& model_id);

std::string finish_reason_text(FinishReason r);

nlohmann::json completion_response(const std::string& id, const std::string& model, bool chat, const std::string& text,
                                   const TextDeltaEvent& last, int64_t created);
// One SSE chunk ("data: {...}\n\n").
std::string stream_chunk(const std::string& id, const std::string& model, bool chat, const std::string& text,
                         const std::optional<FinishReason>& finish, int64_t created, bool first);
std::string usage_chunk(const std::string& id, const std::string& model, bool chat, const TextDeltaEvent& last,
                        int64_t created);

}  // namespace actorlm::api
