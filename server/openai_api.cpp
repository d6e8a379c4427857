#include "server/openai_api.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <limits>
#include <span>
#include <string_view>

#include "scheduler/drafter.hpp"
#include "scheduler/queue_policy.hpp"
#include "scheduler/request.hpp"
#include "server/constraint_fields.hpp"
#include "server/json_reader.hpp"
#include "server/tool_fields.hpp"
#include "server/sampling_fields.hpp"

namespace actorlm::api {

using nlohmann::json;

std::string finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::length:
      return "length";
    case FinishReason::abort:
      return "abort";
    case FinishReason::error:
      return "error";
    default:
      return "stop";
  }
}

namespace {

constexpr size_t kMaxPromptTokens = size_t{1} << 20;
constexpr size_t kMaxPrompts = 32;
constexpr size_t kMaxChoices = 64;

// The body as an object, or why not.
std::variant<const json*, ApiError> body_object(const std::variant<json, ApiError>& parsed) {
  if (const auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  if (!j.is_object()) return bad_request("", "the request body must be a JSON object");
  return &j;
}

// The model a request names: the base model (absent, its id or "default"),
// or a LoRA adapter by its name alone (vLLM's way) or as "<id>:<name>"; a
// `lora` field (a name) picks an adapter too, and must agree with `model`.
std::optional<ApiError> read_model(const FieldReader& f, const ServedModels& models, GenerateOptions& o) {
  auto served = [&](const std::string& name) {
    return std::find(models.adapters.begin(), models.adapters.end(), name) != models.adapters.end();
  };
  if (const json* m = f.find("model")) {
    if (!m->is_string()) return f.error("model", "must be a string");
    const auto& name = m->get_ref<const std::string&>();
    const std::string prefix = models.id + ":";
    if (name == models.id || name == "default") {
    } else if (served(name)) {
      o.adapter = name;
    } else if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
               served(name.substr(prefix.size()))) {
      o.adapter = name.substr(prefix.size());
    } else {
      return ApiError{404, "the model " + echo(name) + " does not exist", "invalid_request_error", "model"};
    }
  }
  if (const json* l = f.find("lora"); l && !l->is_null()) {
    std::string name;
    if (l->is_array()) {
      // llama-server's form: [{"id": i, "scale": s}, ...], i indexing the
      // adapters as /v1/models lists them; scale 0 turns one off. Every
      // adapter left applies, in the list's order, at its scale.
      std::vector<std::pair<int64_t, double>> on;
      for (const json& e : *l) {
        const json* id = e.is_object() && e.contains("id") ? &e["id"] : nullptr;
        const std::optional<int64_t> index = id ? integer_in<int64_t>(*id, 0, 1 << 20) : std::nullopt;
        const json* sc = e.is_object() && e.contains("scale") ? &e["scale"] : nullptr;
        if (!index || (sc && !sc->is_number()) || e.size() > (sc ? 2u : 1u)) {
          return f.error("lora", "must be an adapter's name or a list of {\"id\": int, \"scale\": number}");
        }
        const double scale = sc ? sc->get<double>() : 1.0;
        if (scale == 0.0) continue;
        // Range-checked here as well as by the scheduler: a double past a
        // float's range may not even be converted.
        if (!(std::abs(scale) <= kMaxAdapterScale)) {
          char range[64];
          std::snprintf(range, sizeof range, "%g", static_cast<double>(kMaxAdapterScale));
          return f.error("lora", std::string("a scale must be within [-") + range + ", " + range + "]");
        }
        on.emplace_back(*index, scale);
        if (on.size() > kMaxStackedAdapters + 1) {
          return f.error("lora", "at most " + std::to_string(kMaxStackedAdapters + 1) + " adapters with a scale other than 0");
        }
      }
      if (on.empty()) return std::nullopt;
      for (const auto& [index, scale] : on) {
        if (index >= static_cast<int64_t>(models.adapters.size())) {
          return ApiError{404, "no LoRA adapter with id " + std::to_string(index) + " is loaded", "invalid_request_error", "lora"};
        }
      }
      name = models.adapters[static_cast<size_t>(on[0].first)];
      o.adapter_scale = static_cast<float>(on[0].second);
      for (size_t k = 1; k < on.size(); ++k) {
        o.stacked_adapters.emplace_back(models.adapters[static_cast<size_t>(on[k].first)], static_cast<float>(on[k].second));
      }
    } else if (l->is_string()) {
      name = l->get_ref<const std::string&>();
    } else {
      return f.error("lora", "must be the name of a loaded adapter");
    }
    if (!served(name)) return ApiError{404, "no LoRA adapter named " + echo(name) + " is loaded", "invalid_request_error", "lora"};
    if (!o.adapter.empty() && o.adapter != name) return f.error("lora", "names another adapter than 'model' does");
    o.adapter = name;
  }
  return std::nullopt;
}

// A non-empty list of at most 2^20 token ids; false (ids unspecified) when
// `p` is not one.
bool token_ids(const json* p, std::vector<int32_t>& ids) {
  if (!p || !p->is_array() || p->empty() || p->size() > kMaxPromptTokens) return false;
  ids.reserve(p->size());
  for (const json& t : *p) {
    const std::optional<int32_t> id = integer_in<int32_t>(t, 0, std::numeric_limits<int32_t>::max());
    if (!id) return false;
    ids.push_back(*id);
  }
  return true;
}

std::optional<ApiError> read_token_ids(const FieldReader& f, const char* key,
                                       std::vector<int32_t>& ids) {
  if (token_ids(f.find(key), ids)) return std::nullopt;
  return f.error(key, "must be a non-empty list of at most 1048576 token ids (integers in [0, 2^31 - 1])");
}

// Content as a string or a list of {"type": "text", "text": ...} parts.
std::optional<ApiError> read_content(const FieldReader& m, std::string& content) {
  const json* c = m.find("content");
  if (c && c->is_string()) {
    content = c->get_ref<const std::string&>();
    return std::nullopt;
  }
  if (!c || !c->is_array())
    return m.error("content", "must be a string or a list of content parts");
  for (size_t k = 0; k < c->size(); ++k) {
    const json& part = (*c)[k];
    const std::string path = m.param("content") + "[" + std::to_string(k) + "]";
    if (!part.is_object()) return bad_request(path, "'" + path + "' must be an object");
    const FieldReader p(part, path);
    const json* type = p.find("type");
    if (!type || !type->is_string()) return p.error("type", "must be a string");
    const auto& t = type->get_ref<const std::string&>();
    if (t != "text")
      return p.error("type", "is " + echo(t) + "; only 'text' content parts are supported");
    const json* text = p.find("text");
    if (!text || !text->is_string()) return p.error("text", "must be a string");
    content += text->get_ref<const std::string&>();
  }
  return std::nullopt;
}

std::optional<ApiError> read_messages(const FieldReader& f, std::vector<ChatMessage>& out) {
  const json* ms = f.find("messages");
  if (!ms || !ms->is_array()) return f.error("messages", "must be an array");
  if (ms->empty()) return f.error("messages", "must not be empty");
  for (size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string path = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request(path, "'" + path + "' must be an object");
    const FieldReader mf(m, path);
    const json* role = mf.find("role");
    if (!role || !role->is_string()) return mf.error("role", "must be a string");
    const auto& r = role->get_ref<const std::string&>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      return mf.error("role", "is an unknown role " + echo(r));
    // OpenAI's newer name for system instructions; templates know "system".
    ChatMessage msg{r == "developer" ? "system" : r, ""};
    if (r == "assistant") {
      if (auto e = read_assistant_tool_calls(mf, msg.tool_calls)) return e;
    }
    if (r == "tool") {
      if (!mf.find("tool_call_id")) return mf.error("tool_call_id", "is required in a tool message");
      if (auto e = mf.string("tool_call_id", &msg.tool_call_id)) return e;
    }
    // An assistant turn that only calls tools has no content (null).
    const bool calls_only = !msg.tool_calls.empty() && !mf.find("content");
    if (!calls_only) {
      if (auto e = read_content(mf, msg.content)) return e;
    }
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

// Chat: logprobs is a boolean and top_logprobs a count (0..20).
// Completions: logprobs is the count of alternatives (0..5).
std::optional<ApiError> read_logprobs(const FieldReader& f, bool chat, GenerateOptions& o) {
  if (!chat) {
    if (!f.find("logprobs")) return std::nullopt;
    if (auto e = f.integer<int>("logprobs", 0, 5, &o.top_logprobs)) return e;
    o.logprobs = true;
    return std::nullopt;
  }
  if (auto e = f.boolean("logprobs", &o.logprobs)) return e;
  if (!f.find("top_logprobs")) return std::nullopt;
  if (auto e = f.integer<int>("top_logprobs", 0, 20, &o.top_logprobs)) return e;
  if (!o.logprobs) return f.error("top_logprobs", "needs 'logprobs': true");
  return std::nullopt;
}

// OpenAI refuses stream_options on a request that does not stream.
std::optional<ApiError> read_stream(const FieldReader& f, ParsedRequest& r) {
  if (auto e = f.boolean("stream", &r.stream)) return e;
  const json* so = f.find("stream_options");
  if (!so) return std::nullopt;
  if (!so->is_object()) return f.error("stream_options", "must be an object");
  if (!r.stream) return f.error("stream_options", "is only allowed when 'stream' is true");
  return FieldReader(*so, f.param("stream_options")).boolean("include_usage", &r.include_usage);
}

// Completions' prompt: one string or token list into `o`, or a batch of
// them into `batch`.
std::optional<ApiError> read_prompts(const FieldReader& f, GenerateOptions& o, std::vector<Prompt>& batch) {
  const char* need =
      "must be a string, a non-empty list of at most 1048576 token ids, or a list of at most 32 of either";
  const json* p = f.find("prompt");
  if (p && p->is_string()) {
    o.prompt = p->get_ref<const std::string&>();
    return std::nullopt;
  }
  if (!p || !p->is_array() || p->empty()) return f.error("prompt", need);
  if (!p->front().is_string() && !p->front().is_array()) {
    if (!token_ids(p, o.input_ids)) return f.error("prompt", need);
    return std::nullopt;
  }
  if (p->size() > kMaxPrompts) return f.error("prompt", need);
  for (size_t i = 0; i < p->size(); ++i) {
    const json& one = (*p)[i];
    Prompt prompt;
    if (one.is_string()) {
      prompt.text = one.get_ref<const std::string&>();
    } else if (!token_ids(&one, prompt.ids)) {
      return f.error("prompt", need);
    }
    batch.push_back(std::move(prompt));
  }
  return std::nullopt;
}

// Every field of a chat or completions body is read by this parser or named
// here; anything else (tools, response_format, suffix, best_of, ...) is a
// 400 naming it rather than a request quietly answered without it.
constexpr std::string_view kSamplingKeys[] = {
    "model", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
    "repetition_penalty", "seed", "logit_bias", "n", "max_tokens", "max_completion_tokens", "stop",
    "min_tokens", "ignore_eos", "logprobs", "stream", "stream_options", "priority", "lora", "prediction",
    "speculative.n_max"};
constexpr std::string_view kChatKeys[] = {"messages",        "top_logprobs", "chat_template_kwargs", "response_format",
                                          "tools",           "tool_choice",  "parallel_tool_calls"};
constexpr std::string_view kCompletionKeys[] = {"prompt", "echo", "response_format"};
// Accepted and ignored on purpose: bookkeeping for OpenAI's own platform
// (end-user ids, stored completions, tiers, cache routing keys).
constexpr std::string_view kIgnoredKeys[] = {"user", "metadata", "store", "service_tier", "prompt_cache_key",
                                             "safety_identifier"};

std::optional<ApiError> refuse_unknown_fields(const json& body, bool chat) {
  auto in = [](std::span<const std::string_view> keys, const std::string& k) {
    return std::find(keys.begin(), keys.end(), k) != keys.end();
  };
  for (const auto& [key, value] : body.items()) {
    if (value.is_null() || in(kSamplingKeys, key) || in(kIgnoredKeys, key)) continue;
    if (chat ? in(kChatKeys, key) : in(kCompletionKeys, key)) continue;
    // A long key is cut in the message; the param names it only when it is short.
    return bad_request(key.size() <= kEchoBytes ? key : "", echo(key) + " is not supported by this server" +
                                (chat ? " on /v1/chat/completions" : " on /v1/completions"));
  }
  return std::nullopt;
}

// The body is read into a key-sorted JSON object, but a schema's property
// order is the order the model writes them in (as OpenAI generates them), and
// a template shows tools' parameters in the order given. So for a request
// with a schema or tools, those are taken again from the body in its own
// order (it was already parsed once, depth- and size-bounded, and validated).
void keep_key_order(const std::string& body, ParsedRequest& r) {
  const bool schema = r.options.constraint.kind == ConstraintKind::json_schema;
  if (!schema && r.tools.tools.empty()) return;
  const auto ordered = nlohmann::ordered_json::parse(body, nullptr, false);
  if (!ordered.is_object()) return;
  if (schema) {
    const auto rf = ordered.find("response_format");
    if (rf != ordered.end() && rf->is_object() && rf->contains("json_schema") && (*rf)["json_schema"].is_object() &&
        (*rf)["json_schema"].contains("schema")) {
      r.options.constraint.text = (*rf)["json_schema"]["schema"].dump();
    }
  }
  const auto tools = ordered.find("tools");
  if (r.tools.tools.empty() || tools == ordered.end() || !tools->is_array() || tools->size() != r.tools.names.size())
    return;
  auto list = nlohmann::ordered_json::parse(r.tools.tools);
  for (size_t i = 0; i < tools->size(); ++i) {
    const auto& fn = (*tools)[i]["function"];
    if (!fn.contains("parameters") || !fn["parameters"].is_object()) continue;
    list[i]["function"]["parameters"] = fn["parameters"];
    r.tools.parameters[i] = fn["parameters"].dump();
  }
  r.tools.tools = list.dump();
  if (r.tools.reads_calls()) r.options.tools = r.tools.tools;
}

// vLLM's and SGLang's top-level `priority` (an integer; what it means is the
// server's --schedule-low-priority-values-first). Accepted when the server
// does not schedule by priority, and then without effect.
std::optional<ApiError> read_priority(const FieldReader& f, GenerateOptions& o) {
  return f.integer<int32_t>("priority", -kMaxPriority, kMaxPriority, &o.priority);
}

// Speculative decoding per request. OpenAI's `prediction` ({"type":
// "content", "content": text or a list of text parts}): what the output is
// expected to repeat, where drafts are looked up first. llama-server's
// `speculative.n_max`: the most tokens drafted per step, 0 for none (never
// more than the server's --speculative-num-draft-tokens).
std::optional<ApiError> read_speculative(const FieldReader& f, GenerateOptions& o) {
  if (auto e = f.integer<int32_t>("speculative.n_max", 0, kMaxDraftTokens, &o.max_draft_tokens)) return e;
  const json* p = f.find("prediction");
  if (!p) return std::nullopt;
  const char* need = "must be {\"type\": \"content\", \"content\": a string or a list of text parts}";
  if (!p->is_object()) return f.error("prediction", need);
  const FieldReader pf(*p, "prediction");
  const json* type = pf.find("type");
  const json* content = pf.find("content");
  if (!type || !type->is_string() || type->get_ref<const std::string&>() != "content" || !content) {
    return f.error("prediction", need);
  }
  for (const auto& [key, value] : p->items()) {
    if (key != "type" && key != "content") return f.error("prediction", need);
  }
  if (content->is_string()) {
    o.prediction = content->get_ref<const std::string&>();
    return std::nullopt;
  }
  if (!content->is_array()) return pf.error("content", "must be a string or a list of text parts");
  for (const json& part : *content) {
    auto member = [&part](const char* key) { return part.is_object() && part.contains(key) ? &part[key] : nullptr; };
    const json* type = member("type");
    const json* text = member("text");
    if (!type || !type->is_string() || type->get_ref<const std::string&>() != "text" || !text || !text->is_string() ||
        part.size() != 2) {
      return pf.error("content", "parts must be {\"type\": \"text\", \"text\": a string}");
    }
    o.prediction += text->get_ref<const std::string&>();
  }
  return std::nullopt;
}

std::variant<ParsedRequest, ApiError> checked(ParsedRequest r) {
  if (auto err = r.options.sampling.validate()) return bad_request("", *err);
  return r;
}

}  // namespace

std::variant<ParsedRequest, ApiError> parse_request(const std::string& body, bool chat,
                                                    const ServedModels& models) {
  const auto parsed = read_json(body);
  const auto object = body_object(parsed);
  if (const auto* e = std::get_if<ApiError>(&object)) return *e;
  const FieldReader f(*std::get<const json*>(object), "");
  ParsedRequest r;
  r.chat = chat;
  GenerateOptions& o = r.options;
  o.chat = chat;
  if (auto e = read_model(f, models, o)) return *e;
  if (auto e = refuse_unknown_fields(*std::get<const json*>(object), chat)) return *e;
  if (chat) {
    if (auto e = read_messages(f, o.messages)) return *e;
    if (const json* kw = f.find("chat_template_kwargs")) {
      // vLLM's and SGLang's extension: more variables for the chat template.
      if (!kw->is_object()) return f.error("chat_template_kwargs", "must be an object");
      o.template_kwargs = kw->dump();
    }
  } else if (auto e = read_prompts(f, o, r.prompts)) {
    return *e;
  }
  if (auto e = read_sampling_fields(f, SamplingDialect::openai, o, r.n)) return *e;
  if (auto e = read_priority(f, o)) return *e;
  if (auto e = read_speculative(f, o)) return *e;
  if (auto e = read_logprobs(f, chat, o)) return *e;
  if (auto e = read_stream(f, r)) return *e;
  if (auto e = read_response_format(f, o.constraint)) return *e;
  if (chat) {
    if (auto e = read_tools(f, r.tools)) return *e;
    // tool_choice "none": the model is not shown the tools at all.
    if (r.tools.reads_calls()) o.tools = r.tools.tools;
    const bool forced = r.tools.choice == ToolChoice::required || r.tools.choice == ToolChoice::named;
    if (forced && o.constraint.active()) {
      return f.error("tool_choice", "cannot be combined with a response_format that constrains the output");
    }
  }
  if (!chat) {
    if (auto e = f.boolean("echo", &r.echo)) return *e;
    o.prompt_logprobs = r.echo && o.logprobs;
    if (!r.prompts.empty() && r.prompts.size() * static_cast<size_t>(r.n) > kMaxChoices) {
      return f.error("n", "times the number of prompts must be at most 64");
    }
  }
  keep_key_order(body, r);
  return checked(std::move(r));
}

std::variant<ParsedRequest, ApiError> parse_generate_request(const std::string& body,
                                                             const ServedModels& models) {
  const auto parsed = read_json(body);
  const auto object = body_object(parsed);
  if (const auto* e = std::get_if<ApiError>(&object)) return *e;
  const FieldReader f(*std::get<const json*>(object), "");
  ParsedRequest r;
  r.chat = false;
  GenerateOptions& o = r.options;
  o.chat = false;
  if (auto e = read_model(f, models, o)) return *e;
  const json* text = f.find("text");
  if ((text != nullptr) == (f.find("input_ids") != nullptr)) {
    return bad_request("text",
                       "/generate needs exactly one of a string 'text' and a list 'input_ids'");
  }
  if (text) {
    if (auto e = f.string("text", &o.prompt)) return *e;
  } else if (auto e = read_token_ids(f, "input_ids", o.input_ids)) {
    return *e;
  }
  if (const json* sp = f.find("sampling_params")) {
    if (!sp->is_object()) return f.error("sampling_params", "must be an object");
    if (auto e = read_sampling_fields(FieldReader(*sp, "sampling_params"), SamplingDialect::sglang,
                                      o, r.n))
      return *e;
    if (auto e = read_sglang_constraint(FieldReader(*sp, "sampling_params"), o.constraint)) return *e;
  }
  if (auto e = f.boolean("stream", &r.stream)) return *e;
  if (auto e = read_priority(f, o)) return *e;
  return checked(std::move(r));
}

std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const std::string& body) {
  const auto parsed = read_json(body);
  const auto object = body_object(parsed);
  if (const auto* e = std::get_if<ApiError>(&object)) return *e;
  const FieldReader f(*std::get<const json*>(object), "");
  TokenizeRequest r;
  const char* key = f.find("text") ? "text" : "prompt";
  if (!f.find(key)) return f.error("text", "is required (a string)");
  if (auto e = f.string(key, &r.text)) return *e;
  if (auto e = f.boolean("add_special_tokens", &r.add_special)) return *e;
  return r;
}

std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(const std::string& body) {
  const auto parsed = read_json(body);
  const auto object = body_object(parsed);
  if (const auto* e = std::get_if<ApiError>(&object)) return *e;
  const FieldReader f(*std::get<const json*>(object), "");
  std::vector<int32_t> ids;
  if (auto e = read_token_ids(f, "tokens", ids)) return *e;
  return ids;
}

std::variant<LoraRequest, ApiError> parse_lora_request(const std::string& body, bool load) {
  const auto parsed = read_json(body);
  const auto object = body_object(parsed);
  if (const auto* e = std::get_if<ApiError>(&object)) return *e;
  const json& j = *std::get<const json*>(object);
  const FieldReader f(j, "");
  for (const auto& [key, value] : j.items()) {
    const bool known = key == "lora_name" || (load && (key == "lora_path" || key == "scale")) || key == "lora_int_id";
    if (!known) return bad_request(key.size() <= kEchoBytes ? key : "", echo(key) + " is not a field of this route");
  }
  LoraRequest r;
  if (!f.find("lora_name")) return bad_request("lora_name", "the adapter's name is required");
  if (auto e = f.string("lora_name", &r.name)) return *e;
  if (load) {
    if (!f.find("lora_path")) return bad_request("lora_path", "the adapter's file is required");
    if (auto e = f.string("lora_path", &r.path)) return *e;
    if (r.path.empty() || r.path.size() > 4096) return bad_request("lora_path", "must be a path of 1-4096 bytes");
    if (auto e = f.number("scale", -100.0, 100.0, &r.scale)) return *e;
  }
  return r;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

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
        top.push_back(
            {{"token", alt.piece}, {"logprob", alt.logprob}, {"bytes", bytes_of(alt.piece)}});
      }
      content.push_back({{"token", t.piece},
                         {"logprob", t.logprob},
                         {"bytes", bytes_of(t.piece)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = text_offset;
  for (const auto& t : tokens) {
    toks.push_back(t.piece);
    // An echoed prompt's first token: nothing predicts it.
    const bool unscored = std::isnan(t.logprob);
    lps.push_back(unscored ? json(nullptr) : json(t.logprob));
    // The token itself is always among its alternatives, as OpenAI documents
    // for this legacy field (and vLLM does): `logprobs: N` gives N or N + 1
    // entries, and `logprobs: 0` the token alone.
    json top = json::object();
    for (const auto& alt : t.top) top[alt.piece] = alt.logprob;
    if (!top.contains(t.piece)) top[t.piece] = t.logprob;
    tops.push_back(unscored ? json(nullptr) : top);
    offsets.push_back(offset);
    offset += t.piece.size();
  }
  return {
      {"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json usage_json(const std::vector<ChoiceResult>& choices, int n) {
  // Each prompt counts once however many choices it has.
  int32_t prompt = 0, cached = 0, completion = 0, drafted = 0, accepted = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i % static_cast<size_t>(n) == 0) {
      prompt += choices[i].last.prompt_tokens;
      cached += choices[i].last.cached_tokens;
    }
    completion += choices[i].last.completion_tokens;
    drafted += choices[i].last.draft_tokens;
    accepted += choices[i].last.accepted_draft_tokens;
  }
  json usage = {{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  // Speculative decoding, in OpenAI's words for predicted outputs: drafted
  // tokens the model kept and those it did not.
  if (drafted > 0) {
    usage["completion_tokens_details"] = {{"accepted_prediction_tokens", accepted},
                                          {"rejected_prediction_tokens", drafted - accepted}};
  }
  return usage;
}

json completion_response(const std::string& id, const std::string& model, bool chat,
                         const std::vector<ChoiceResult>& choices, int n, bool with_logprobs,
                         int64_t created) {
  json out_choices = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", finish_reason_text(c.last.finish)}};
    choice["logprobs"] = with_logprobs ? logprobs_json(chat, c.logprobs, 0) : json(nullptr);
    if (chat && !c.tool_calls.empty()) {
      // OpenAI: content is null when the answer is only calls.
      choice["message"] = {{"role", "assistant"},
                           {"content", c.text.empty() ? json(nullptr) : json(c.text)},
                           {"tool_calls", tool_calls_json(c.tool_calls, false)}};
      choice["finish_reason"] = "tool_calls";
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    out_choices.push_back(choice);
  }
  return {{"id", id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", out_choices},
          {"usage", usage_json(choices, n)}};
}

std::string stream_chunk(const std::string& id, const std::string& model, bool chat, int index,
                         const std::string& text, const std::optional<FinishReason>& finish,
                         int64_t created, bool first, const json& logprobs) {
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

json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    char hex[25];
    std::snprintf(hex, sizeof hex, "%016llx%08x", static_cast<unsigned long long>(rng()), static_cast<unsigned>(rng()));
    json call = {{"id", std::string("call_") + hex},
                 {"type", "function"},
                 {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (with_index) call["index"] = k;
    out.push_back(std::move(call));
  }
  return out;
}

std::string tool_calls_chunk(const std::string& id, const std::string& model, int index,
                             const std::vector<ToolCall>& calls, int64_t created) {
  auto chunk = [&](json delta, json finish) {
    json c = {{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", json::array({{{"index", index}, {"logprobs", nullptr}, {"delta", std::move(delta)},
                                        {"finish_reason", std::move(finish)}}})}};
    return "data: " + dump(c) + "\n\n";
  };
  return chunk({{"tool_calls", tool_calls_json(calls, true)}}, nullptr) + chunk(json::object(), "tool_calls");
}

json generate_response(const ChoiceResult& c) {
  return {{"text", c.text},
          {"meta_info",
           {{"finish_reason", finish_reason_text(c.last.finish)},
            {"prompt_tokens", c.last.prompt_tokens},
            {"completion_tokens", c.last.completion_tokens}}}};
}

json generate_response(const std::vector<ChoiceResult>& choices) {
  if (choices.size() == 1) return generate_response(choices[0]);
  json out = json::array();
  for (const ChoiceResult& c : choices) out.push_back(generate_response(c));
  return out;
}

std::string usage_chunk(const std::string& id, const std::string& model, bool chat,
                        const std::vector<ChoiceResult>& choices, int n, int64_t created) {
  json chunk = {{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array()},
                {"usage", usage_json(choices, n)}};
  return "data: " + dump(chunk) + "\n\n";
}

}  // namespace actorlm::api
