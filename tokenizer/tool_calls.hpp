#pragma once
// Function calling: how a model is shown tools and how its answer is read
// back as calls. Models trained for tools write calls in their family's own
// way; the chat template says which:
//   hermes  (Qwen2/2.5/3, Hermes, SmolLM3...): <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number;
//   llama3  (Llama 3.1+ JSON calling): {"name": ..., "parameters": {...}}, optionally after <|python_tag|>;
//   mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...];
//   generic: the template never reads `tools` (e.g. SmolLM2): the tools and
//            the hermes convention are described in a system message
//            actorlm adds, and calls are read as hermes.
// Pure functions, no state.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace actorlm {

class Tokenizer;

enum class ToolFormat : uint8_t { hermes, llama3, mistral, generic };

ToolFormat tool_format_for(std::string_view chat_template_source);
// The format of the template a model is served with: `override` (a
// --chat-template-file's text) when not empty, else the model's own.
ToolFormat tool_format_for(const Tokenizer& tok, std::string_view override);

// The text around one call's JSON object, and the key its arguments sit
// under, for constraining a required call (llama3: "parameters").
struct ToolCallFrame {
  std::string prefix, suffix;
  std::string arguments_key;
};
ToolCallFrame tool_call_frame(ToolFormat f);

// generic: the system-message text that presents `tools` (OpenAI's list).
std::string tool_system_prompt(const nlohmann::ordered_json& tools);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text
};
struct ParsedToolCalls {
  std::string content;  // the text outside the calls, trimmed
  std::vector<ToolCall> calls;
};

// The calls in a model's answer. Only calls to a function in `names` whose
// arguments are a JSON object count; anything else stays content, so a model
// that talks about JSON is not mistaken for one that calls.
ParsedToolCalls parse_tool_calls(ToolFormat f, std::string_view text, const std::vector<std::string>& names);

// Streaming: how many leading bytes of an unfinished answer are content
// whatever follows (they can be sent now); the rest may be, or begin, a
// call. hermes/generic: up to the first "<tool_call>" or a trailing piece of
// one; llama3/mistral: everything once the answer has started with text
// that is not a call's start, else nothing.
size_t settled_content(ToolFormat f, std::string_view text);

}  // namespace actorlm
