#include "server/openai_api.hpp"

#include <cmath>

namespace actorlm::api {

using nlohmann::json;

json ApiError::body() const {
  json e = {{"message", message}, {"type", type}, {"code", status}};
  e["param"] = param.empty() ? json(nullptr) : json(param);
  return {{"error", e}};
}

std::string finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
    case FinishReason::error: return "error";
    default: return "stop";
  }
}

namespace {

ApiError bad(const std::string& param, const std::string& message) { return {400, message, "invalid_request_error", param}; }

// Reads an optional number field, checking type and range.
std::optional<ApiError> number(const json& j, const char* key, double lo, double hi, double* out) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number()) return bad(key, std::string("'") + key + "' must be a number");
  double v = j[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number_integer()) return bad(key, std::string("'") + key + "' must be an integer");
  auto v = j[key].get<int64_t>();
  if (v < lo || v > hi) {
    return bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  *out = v;
  return std::nullopt;
}

}  // namespace

std::variant<ParsedRequest, ApiError> parse_request(const std::string& body, bool chat, const std::string& model_id) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("", "the request body is not valid JSON");
  if (!j.is_object()) return bad("", "the request body must be a JSON object");
  ParsedRequest r;
  r.chat = chat;
  GenerateOptions& o = r.options;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) return bad("model", "'model' must be a string");
    auto m = j["model"].get<std::string>();
    if (m != model_id && m != "default") return ApiError{404, "the model '" + m + "' does not exist", "invalid_request_error", "model"};
  }
  if (chat) {
    if (!j.contains("messages") || !j["messages"].is_array()) return bad("messages", "'messages' must be an array");
    if (j["messages"].empty()) return bad("messages", "'messages' must not be empty");
    for (const auto& m : j["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return bad("messages", "each message needs a string 'role'");
      std::string role = m["role"];
      if (role != "system" && role != "user" && role != "assistant") return bad("messages", "unknown role '" + role + "'");
      std::string content;
      if (m.contains("content") && m["content"].is_string()) {
        content = m["content"];
      } else if (m.contains("content") && m["content"].is_array()) {  // [{type: text, text: ...}]
        for (const auto& part : m["content"]) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
            return bad("messages", "only text content parts are supported");
          content += part["text"].get<std::string>();
        }
      } else {
        return bad("messages", "each message needs string 'content'");
      }
      o.messages.push_back({role, content});
    }
  } else {
    o.chat = false;
    const json* p = j.contains("prompt") ? &j["prompt"] : nullptr;
    if (p && p->is_string()) {
      o.prompt = *p;
    } else if (p && p->is_array() && !p->empty() && p->size() <= (1u << 20)) {  // token ids
      for (const auto& t : *p) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
          return bad("prompt", "a token-id 'prompt' must hold non-negative integers");
        }
        o.input_ids.push_back(t.get<int32_t>());
      }
    } else {
      return bad("prompt", "'prompt' must be a string or a non-empty list of token ids");
    }
  }
  double v = 0;
  int64_t n = 0;
  o.sampling.temperature = 1.0f;
  if (auto e = number(j, "temperature", 0, 2, &v)) return *e;
  if (j.contains("temperature") && !j["temperature"].is_null()) o.sampling.temperature = static_cast<float>(v);
  if (auto e = number(j, "top_p", 1e-9, 1, &v)) return *e;
  if (j.contains("top_p") && !j["top_p"].is_null()) o.sampling.top_p = static_cast<float>(v);
  if (auto e = integer(j, "top_k", -1, 1 << 20, &n)) return *e;
  if (j.contains("top_k") && !j["top_k"].is_null()) o.sampling.top_k = static_cast<int32_t>(n);
  if (auto e = number(j, "min_p", 0, 1, &v)) return *e;
  if (j.contains("min_p") && !j["min_p"].is_null()) o.sampling.min_p = static_cast<float>(v);
  if (auto e = number(j, "frequency_penalty", -2, 2, &v)) return *e;
  if (j.contains("frequency_penalty") && !j["frequency_penalty"].is_null()) o.sampling.frequency_penalty = static_cast<float>(v);
  if (auto e = number(j, "presence_penalty", -2, 2, &v)) return *e;
  if (j.contains("presence_penalty") && !j["presence_penalty"].is_null()) o.sampling.presence_penalty = static_cast<float>(v);
  if (auto e = number(j, "repetition_penalty", 1e-3, 10, &v)) return *e;
  if (j.contains("repetition_penalty") && !j["repetition_penalty"].is_null()) o.sampling.repetition_penalty = static_cast<float>(v);
  if (auto e = integer(j, "seed", 0, INT64_MAX, &n)) return *e;
  if (j.contains("seed") && !j["seed"].is_null()) {
    o.sampling.seed = static_cast<uint64_t>(n);
    o.sampling.has_seed = true;
  }
  o.max_new_tokens = 256;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (auto e = integer(j, key, 1, 1 << 20, &n)) return *e;
    if (j.contains(key) && !j[key].is_null()) o.max_new_tokens = static_cast<int32_t>(n);
  }
  if (auto e = integer(j, "n", 1, 16, &n)) return *e;
  if (j.contains("n") && !j["n"].is_null()) r.n = static_cast<int>(n);
  // Chat: logprobs is a boolean and top_logprobs a count (0..20).
  // Completions: logprobs is the count of alternatives (0..5).
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    if (chat) {
      if (!j["logprobs"].is_boolean()) return bad("logprobs", "'logprobs' must be a boolean");
      o.logprobs = j["logprobs"];
    } else {
      if (auto e = integer(j, "logprobs", 0, 5, &n)) return *e;
      o.logprobs = true;
      o.top_logprobs = static_cast<int>(n);
    }
  }
  if (chat && j.contains("top_logprobs") && !j["top_logprobs"].is_null()) {
    if (auto e = integer(j, "top_logprobs", 0, 20, &n)) return *e;
    if (!o.logprobs) return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    o.top_logprobs = static_cast<int>(n);
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const auto& s = j["stop"];
    if (s.is_string()) {
      o.stop.push_back(s);
    } else if (s.is_array() && s.size() <= 16) {
      for (const auto& x : s) {
        if (!x.is_string()) return bad("stop", "'stop' must be a string or a list of strings");
        o.stop.push_back(x);
      }
    } else {
      return bad("stop", "'stop' must be a string or a list of at most 16 strings");
    }
  }
  // vLLM / SGLang extension: keep generating past end-of-sequence (benchmarks).
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
    if (!j["ignore_eos"].is_boolean()) return bad("ignore_eos", "'ignore_eos' must be a boolean");
    o.ignore_eos = j["ignore_eos"];
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return bad("stream", "'stream' must be a boolean");
    r.stream = j["stream"];
  }
  if (j.contains("stream_options") && j["stream_options"].is_object()) {
    r.include_usage = j["stream_options"].value("include_usage", false);
  }
  if (auto err = o.sampling.validate()) return bad("", *err);
  return r;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

json bytes_of(const std::string& piece) {
  json b = json::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

json logprobs_json(bool chat, const std::vector<TokenLogprobInfo>& tokens, size_t text_offset) {
  if (chat) {
    json content = json::array();
    for (const auto& t : tokens) {
      json top = json::array();
      for (const auto& alt : t.top) {
        top.push_back({{"token", alt.piece}, {"logprob", alt.logprob}, {"bytes", bytes_of(alt.piece)}});
      }
      content.push_back({{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes_of(t.piece)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = text_offset;
  for (const auto& t : tokens) {
    toks.push_back(t.piece);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& alt : t.top) top[alt.piece] = alt.logprob;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.piece.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json completion_response(const std::string& id, const std::string& model, bool chat, const std::vector<ChoiceResult>& choices,
                         bool with_logprobs, int64_t created) {
  json out_choices = json::array();
  int32_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", finish_reason_text(c.last.finish)}};
    choice["logprobs"] = with_logprobs ? logprobs_json(chat, c.logprobs, 0) : json(nullptr);
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    out_choices.push_back(choice);
    prompt_tokens = c.last.prompt_tokens;  // the same prompt for every choice
    completion_tokens += c.last.completion_tokens;
  }
  return {{"id", id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", out_choices},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}}};
}

std::string stream_chunk(const std::string& id, const std::string& model, bool chat, int index, const std::string& text,
                         const std::optional<FinishReason>& finish, int64_t created, bool first, const json& logprobs) {
  json choice = {{"index", index}, {"logprobs", logprobs}};
  choice["finish_reason"] = finish ? json(finish_reason_text(*finish)) : json(nullptr);
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || !finish) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  json chunk = {{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array({choice})}};
  return "data: " + dump(chunk) + "\n\n";
}

std::string usage_chunk(const std::string& id, const std::string& model, bool chat, int32_t prompt_tokens,
                        int32_t completion_tokens, int64_t created) {
  json chunk = {{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array()},
                {"usage",
                 {{"prompt_tokens", prompt_tokens},
                  {"completion_tokens", completion_tokens},
                  {"total_tokens", prompt_tokens + completion_tokens}}}};
  return "data: " + dump(chunk) + "\n\n";
}

}  // namespace actorlm::api
