#pragma once
// OpenAI-compatible and SGLang-native request parsing and response formatting
// (JSON only, no HTTP). A client body is parsed once, depth- and size-bounded
// (json_reader.hpp), then read field by field: every field is type-checked
// and every number range-checked, and a bad request becomes an ApiError with
// the HTTP status and OpenAI's error object. Nothing here throws on client
// input, and no client JSON is copied or re-serialized.
//
// Conventions shared by every route:
// - An optional field given as null counts as absent (OpenAI's optional
//   fields are nullable); a required one (a message's role, a content part's
//   type) given as null is refused.
// - Integer fields take JSON integers only (5.0, 5e0 and "5" are refused);
//   ranges are in sampling_fields.hpp.
// - Unknown fields are ignored, as the OpenAI-compatible servers do.
// - Client text echoed in an error is cut to api::kEchoBytes (api_error.hpp).

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/engine.hpp"
#include "server/api_error.hpp"

namespace actorlm::api {

struct ParsedRequest {
  GenerateOptions options;
  bool stream = false;
  bool include_usage = false;
  bool chat = true;  // chat's response format; false: completions' (also /generate's stream)
  int n = 1;         // choices; choice i samples with seed + i when a seed is given
};

// /v1/chat/completions (chat) or /v1/completions. The model must be absent,
// model_id or "default" (else 404). stream_options needs "stream": true.
// Completions' prompt: a string or a non-empty list of at most 2^20 token ids.
std::variant<ParsedRequest, ApiError> parse_request(const std::string& body, bool chat,
                                                    const std::string& model_id);

// SGLang's native /generate: {"text": str | "input_ids": [int...],
// "sampling_params": {...}, "stream": bool} with exactly one of text and
// input_ids; sampling_params takes the fields of sampling_fields.hpp with
// "max_new_tokens" for the output length. A "model" field, if given, is
// checked as on the OpenAI routes. The result streams in completions' format.
std::variant<ParsedRequest, ApiError> parse_generate_request(const std::string& body,
                                                             const std::string& model_id);

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
nlohmann::json logprobs_json(bool chat, const std::vector<TokenLogprobInfo>& tokens,
                             size_t text_offset);

// with_logprobs: whether the request asked for them (else "logprobs": null).
nlohmann::json completion_response(const std::string& id, const std::string& model, bool chat,
                                   const std::vector<ChoiceResult>& choices, bool with_logprobs,
                                   int64_t created);
// One SSE chunk ("data: {...}\n\n") for choice `index`.
std::string stream_chunk(const std::string& id, const std::string& model, bool chat, int index,
                         const std::string& text, const std::optional<FinishReason>& finish,
                         int64_t created, bool first, const nlohmann::json& logprobs);
// /generate's reply for one choice: {"text", "meta_info": {"finish_reason",
// "prompt_tokens", "completion_tokens"}}.
nlohmann::json generate_response(const ChoiceResult& c);
// For a whole request: that object for n = 1, a list of them for n > 1
// (SGLang's shape).
nlohmann::json generate_response(const std::vector<ChoiceResult>& choices);

std::string usage_chunk(const std::string& id, const std::string& model, bool chat,
                        int32_t prompt_tokens, int32_t completion_tokens, int64_t created);

// JSON text for the wire: invalid UTF-8 (a token piece that splits a
// character) becomes U+FFFD instead of an exception. For JSON the server
// builds only: dump() recurses once per nesting level, so client JSON is
// never passed here.
std::string dump(const nlohmann::json& j);

}  // namespace actorlm::api
