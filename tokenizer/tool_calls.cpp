#include "tokenizer/tool_calls.hpp"

#include <algorithm>

#include "tokenizer/tokenizer.hpp"

namespace actorlm {

using nlohmann::ordered_json;

namespace {

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// One call object ({"name": str, <args_key>: object}) as a ToolCall, if it is
// one to a known function.
bool as_call(const ordered_json& j, const std::string& args_key, const std::vector<std::string>& names,
             std::vector<ToolCall>& out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"].get<std::string>();
  if (std::find(names.begin(), names.end(), name) == names.end()) return false;
  const ordered_json* args = nullptr;
  for (const char* key : {args_key.c_str(), "arguments", "parameters"}) {
    if (j.contains(key)) {
      args = &j[key];
      break;
    }
  }
  ordered_json parsed;
  if (args && args->is_string()) {
    // Some models write the arguments as a JSON string, as OpenAI sends them.
    parsed = ordered_json::parse(args->get<std::string>(), nullptr, false);
    args = parsed.is_discarded() ? nullptr : &parsed;
  }
  if (args && !args->is_object()) return false;
  out.push_back({name, args ? args->dump() : "{}"});
  return true;
}

// One JSON value at the start of `s` (after whitespace): its parse and
// length, or discarded.
std::pair<ordered_json, size_t> leading_json(std::string_view s) {
  const size_t start = s.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || (s[start] != '{' && s[start] != '[')) return {ordered_json(ordered_json::value_t::discarded), 0};
  // Find the matching close bracket outside strings, then parse that much.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) {
      auto j = ordered_json::parse(s.substr(start, i + 1 - start), nullptr, false);
      return {std::move(j), i + 1};
    }
  }
  return {ordered_json(ordered_json::value_t::discarded), 0};
}

ParsedToolCalls parse_tagged(std::string_view text, const std::vector<std::string>& names) {
  constexpr std::string_view open = "<tool_call>", close = "</tool_call>";
  ParsedToolCalls r;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t b = text.find(open, at);
    if (b == std::string_view::npos) break;
    const size_t body = b + open.size();
    size_t e = text.find(close, body);
    const bool closed = e != std::string_view::npos;
    if (!closed) e = text.size();  // cut by max_tokens or a stop: parse what is there
    auto [j, used] = leading_json(text.substr(body, e - body));
    std::vector<ToolCall> calls;
    bool ok = !j.is_discarded();
    if (ok && j.is_array()) {
      for (const auto& one : j) ok = ok && as_call(one, "arguments", names, calls);
    } else if (ok) {
      ok = as_call(j, "arguments", names, calls);
    }
    if (!ok) break;  // not a call: the rest stays content
    content.append(text.substr(at, b - at));
    r.calls.insert(r.calls.end(), calls.begin(), calls.end());
    at = closed ? e + close.size() : text.size();
  }
  content.append(text.substr(std::min(at, text.size())));
  r.content = std::string(trim(content));
  return r;
}

ParsedToolCalls parse_leading_json(std::string_view text, std::string_view marker, const std::string& args_key,
                                   const std::vector<std::string>& names) {
  ParsedToolCalls r;
  std::string_view t = trim(text);
  if (!marker.empty() && t.substr(0, marker.size()) == marker) t = trim(t.substr(marker.size()));
  auto [j, used] = leading_json(t);
  std::vector<ToolCall> calls;
  bool ok = !j.is_discarded();
  if (ok && j.is_array()) {
    for (const auto& one : j) ok = ok && as_call(one, args_key, names, calls);
    ok = ok && !calls.empty();
  } else if (ok) {
    ok = as_call(j, args_key, names, calls);
  }
  if (!ok) {
    r.content = std::string(trim(text));
    return r;
  }
  r.calls = std::move(calls);
  r.content = std::string(trim(t.substr(used)));
  return r;
}

}  // namespace

ToolFormat tool_format_for(std::string_view source) {
  if (source.find("<tool_call>") != std::string_view::npos) return ToolFormat::hermes;
  if (source.find("[TOOL_CALLS]") != std::string_view::npos) return ToolFormat::mistral;
  if (source.find("<|python_tag|>") != std::string_view::npos || source.find("ipython") != std::string_view::npos)
    return ToolFormat::llama3;
  return ToolFormat::generic;
}

ToolFormat tool_format_for(const Tokenizer& tok, std::string_view override) {
  return tool_format_for(override.empty() ? std::string_view(tok.chat_template()) : override);
}

ToolCallFrame tool_call_frame(ToolFormat f) {
  switch (f) {
    case ToolFormat::llama3: return {"", "", "parameters"};
    // [TOOL_CALLS] is a control token, which a constrained output cannot
    // write; the parser reads the bare list as well.
    case ToolFormat::mistral: return {"[", "]", "arguments"};
    case ToolFormat::hermes:
    case ToolFormat::generic: break;
  }
  return {"<tool_call>\n", "\n</tool_call>", "arguments"};
}

std::string tool_system_prompt(const ordered_json& tools) {
  std::string s =
      "You can call functions. Their signatures, as JSON Schema, are listed in <tools></tools>:\n<tools>\n";
  for (const auto& t : tools) s += t.dump() + "\n";
  s += "</tools>\nTo call one, reply with its name and arguments as a JSON object inside "
       "<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
       "</tool_call>";
  return s;
}

size_t settled_content(ToolFormat f, std::string_view text) {
  auto could_open = [](std::string_view rest, std::string_view marker) {
    const size_t n = std::min(rest.size(), marker.size());
    return rest.substr(0, n) == marker.substr(0, n);
  };
  if (f == ToolFormat::llama3 || f == ToolFormat::mistral) {
    const std::string_view t = trim(text);
    if (t.empty()) return 0;
    const bool call = f == ToolFormat::llama3 ? t[0] == '{' || could_open(t, "<|python_tag|>")
                                              : t[0] == '[' || could_open(t, "[TOOL_CALLS]");
    return call ? 0 : text.size();
  }
  constexpr std::string_view open = "<tool_call>";
  if (const size_t at = text.find(open); at != std::string_view::npos) return at;
  // A '<' near the end may be the start of the tag.
  for (size_t i = text.size() > open.size() ? text.size() - open.size() : 0; i < text.size(); ++i) {
    if (text[i] == '<' && could_open(text.substr(i), open)) return i;
  }
  return text.size();
}

ParsedToolCalls parse_tool_calls(ToolFormat f, std::string_view text, const std::vector<std::string>& names) {
  switch (f) {
    case ToolFormat::llama3: return parse_leading_json(text, "<|python_tag|>", "parameters", names);
    case ToolFormat::mistral: return parse_leading_json(text, "[TOOL_CALLS]", "arguments", names);
    case ToolFormat::hermes:
    case ToolFormat::generic: break;
  }
  return parse_tagged(text, names);
}

}  // namespace actorlm
