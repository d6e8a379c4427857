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
// - On the OpenAI routes every field is honoured or refused with a 400
//   naming it; a few bookkeeping fields (user, metadata, store,
//   service_tier, prompt_cache_key, safety_identifier) are accepted and
//   ignored on purpose. /generate ignores fields it does not know, as SGLang.
// - Client text echoed in an error is cut to api::kEchoBytes (api_error.hpp).

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/engine.hpp"
#include "server/api_error.hpp"
#include "server/tool_fields.hpp"

namespace actorlm::api {

// One prompt of a completions request: text, or token ids.
struct Prompt {
  std::string text;
  std::vector<int32_t> ids;  // used when not empty
};

struct ParsedRequest {
  GenerateOptions options;
  bool stream = false;
  bool include_usage = false;
  bool chat = true;  // chat's response format; false: completions' (also /generate's stream)
  int n = 1;         // choices per prompt; choice i samples with seed + i when a seed is given
  // Completions given a list of prompts (a batch): choice p * n + i is
  // prompt p's choice i. Empty: options' own prompt, one.
  std::vector<Prompt> prompts;
  bool echo = false;  // completions: each choice's text starts with its prompt
  ToolRequest tools;  // chat: function calling (server/tool_fields.hpp)
};

// What a request's "model" may name: the base model (`id`, or "default")
// and the LoRA adapters by name ("NAME" or "<id>:NAME"; also a "lora"
// field holding a name).
struct ServedModels {
  std::string id;
  std::vector<std::string> adapters;
  ServedModels(std::string model_id, std::vector<std::string> adapter_names = {})  // NOLINT: a bare id converts
      : id(std::move(model_id)), adapters(std::move(adapter_names)) {}
  ServedModels(const char* model_id) : ServedModels(std::string(model_id)) {}  // NOLINT
};

// /v1/chat/completions (chat) or /v1/completions. The model must be absent,
// the base model or an adapter (ServedModels; else 404). stream_options needs "stream": true.
// Completions' prompt: a string, a non-empty list of at most 2^20 token ids,
// or a batch: a list of up to 32 strings or of up to 32 such lists (prompts
// x n at most 64 choices). echo: true (completions) puts the prompt before
// the generated text, and with logprobs its tokens before the generated ones
// (the first with null logprob and top_logprobs, as OpenAI). Chat roles: system, developer (as system), user,
// assistant.
std::variant<ParsedRequest, ApiError> parse_request(const std::string& body, bool chat,
                                                    const ServedModels& models);

// SGLang's native /generate: {"text": str | "input_ids": [int...],
// "sampling_params": {...}, "stream": bool} with exactly one of text and
// input_ids; sampling_params takes the fields of sampling_fields.hpp with
// "max_new_tokens" for the output length. A "model" field, if given, is
// checked as on the OpenAI routes. The result streams in completions' format.
std::variant<ParsedRequest, ApiError> parse_generate_request(const std::string& body,
                                                             const ServedModels& models);

// /tokenize: {"text" (SGLang) or "prompt" (vLLM): str, "add_special_tokens":
// bool = true}; /detokenize: {"tokens": [int...]} (ids checked against the
// vocabulary by the caller).
struct TokenizeRequest {
  std::string text;
  bool add_special = true;
};
std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const std::string& body);
std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(const std::string& body);

// vLLM's /v1/load_lora_adapter {"lora_name": str, "lora_path": str, "scale":
// number = 1 (ours)} and /v1/unload_lora_adapter {"lora_name": str}
// (load: false; path empty). The path is the server's to check.
struct LoraRequest {
  std::string name;
  std::string path;
  float scale = 1.0f;
};
std::variant<LoraRequest, ApiError> parse_lora_request(const std::string& body, bool load);

std::string finish_reason_text(FinishReason r);

// One finished choice.
struct ChoiceResult {
  std::string text;
  std::vector<ToolCall> tool_calls;  // read back from text (then text is what is left)
  TextDeltaEvent last;
  std::vector<TokenLogprobInfo> logprobs;
};

// OpenAI's logprobs object for some tokens: chat's {"content": [...]} or
// completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
// (offsets counted from text_offset).
nlohmann::json logprobs_json(bool chat, const std::vector<TokenLogprobInfo>& tokens,
                             size_t text_offset);

// OpenAI's usage object over a request's choices, n per prompt: each
// prompt's tokens (and those of them the radix cache held,
// prompt_tokens_details.cached_tokens) counted once.
nlohmann::json usage_json(const std::vector<ChoiceResult>& choices, int n);

// with_logprobs: whether the request asked for them (else "logprobs": null).
nlohmann::json completion_response(const std::string& id, const std::string& model, bool chat,
                                   const std::vector<ChoiceResult>& choices, int n, bool with_logprobs,
                                   int64_t created);
// One SSE chunk ("data: {...}\n\n") for choice `index`.
std::string stream_chunk(const std::string& id, const std::string& model, bool chat, int index,
                         const std::string& text, const std::optional<FinishReason>& finish,
                         int64_t created, bool first, const nlohmann::json& logprobs);
// Chat: a choice's calls as one delta, then its finish ("tool_calls").
std::string tool_calls_chunk(const std::string& id, const std::string& model, int index,
                             const std::vector<ToolCall>& calls, int64_t created);
// OpenAI's tool_calls list (ids "call_" + 24 random hex digits).
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);

// /generate's reply for one choice: {"text", "meta_info": {"finish_reason",
// "prompt_tokens", "completion_tokens"}}.
nlohmann::json generate_response(const ChoiceResult& c);
// For a whole request: that object for n = 1, a list of them for n > 1
// (SGLang's shape).
nlohmann::json generate_response(const std::vector<ChoiceResult>& choices);

std::string usage_chunk(const std::string& id, const std::string& model, bool chat,
                        const std::vector<ChoiceResult>& choices, int n, int64_t created);

// JSON text for the wire: invalid UTF-8 (a token piece that splits a
// character) becomes U+FFFD instead of an exception. For JSON the server
// builds only: dump() recurses once per nesting level, so client JSON is
// never passed here.
std::string dump(const nlohmann::json& j);

}  // namespace actorlm::api
