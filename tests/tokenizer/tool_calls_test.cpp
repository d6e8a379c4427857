#include "tokenizer/tool_calls.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace actorlm;

namespace {
const std::vector<std::string> kNames = {"get_weather", "get_time"};
}

TEST_CASE("the chat template decides how tools are shown and calls written", "[tokenizer][tools]") {
  CHECK(tool_format_for("{% for t in tools %}...<tool_call>\\n{{ t }}</tool_call>{% endfor %}") == ToolFormat::hermes);
  CHECK(tool_format_for("{{ '[TOOL_CALLS]' }}{{ message.tool_calls | tojson }}") == ToolFormat::mistral);
  CHECK(tool_format_for("{%- if message.role == 'ipython' %}<|python_tag|>{% endif %}") == ToolFormat::llama3);
  CHECK(tool_format_for("{{ '<|im_start|>' + message['role'] }}") == ToolFormat::generic);
  CHECK(tool_format_for("") == ToolFormat::generic);
}

TEST_CASE("hermes calls are read between tags, with the content around them", "[tokenizer][tools]") {
  const auto r = parse_tool_calls(ToolFormat::hermes,
                                  "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                  "\"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": "
                                  "{\"timezone\": \"Europe/Paris\"}}</tool_call>",
                                  kNames);
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(nlohmann::json::parse(r.calls[0].arguments) == nlohmann::json{{"city", "Paris"}});
  CHECK(r.calls[1].name == "get_time");
  CHECK(r.content == "Let me check.");
  // Arguments written as a JSON string, as OpenAI sends them, are read too;
  // a call cut by max_tokens before its closing tag still counts if whole.
  const auto s = parse_tool_calls(
      ToolFormat::generic, "<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"timezone\\\": \\\"UTC\\\"}\"}", kNames);
  REQUIRE(s.calls.size() == 1);
  CHECK(nlohmann::json::parse(s.calls[0].arguments) == nlohmann::json{{"timezone", "UTC"}});
  CHECK(s.content.empty());
}

TEST_CASE("what is not a call to a known function stays content", "[tokenizer][tools]") {
  for (const char* text : {"<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
                           "<tool_call>{\"name\": \"get_time\", \"arguments\": [1]}</tool_call>",
                           "<tool_call>not json</tool_call>", "<tool_call>{\"name\": \"get_time\"",
                           "Here is JSON: {\"name\": \"get_time\", \"arguments\": {}}"}) {
    const auto r = parse_tool_calls(ToolFormat::hermes, text, kNames);
    CHECK(r.calls.empty());
    CHECK(r.content == text);
  }
  const auto l = parse_tool_calls(ToolFormat::llama3, "Sure! {\"name\": \"get_time\", \"parameters\": {}}", kNames);
  CHECK(l.calls.empty());
}

TEST_CASE("llama3 and mistral calls are read from the start of the answer", "[tokenizer][tools]") {
  const auto l = parse_tool_calls(ToolFormat::llama3,
                                  "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", kNames);
  REQUIRE(l.calls.size() == 1);
  CHECK(nlohmann::json::parse(l.calls[0].arguments) == nlohmann::json{{"city", "Oslo"}});
  const auto m = parse_tool_calls(ToolFormat::mistral,
                                  "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
                                  "{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Rome\"}}]",
                                  kNames);
  REQUIRE(m.calls.size() == 2);
  CHECK(m.calls[1].name == "get_time");
  // A constrained call is the bare list (the control token cannot be forced).
  const ToolCallFrame frame = tool_call_frame(ToolFormat::mistral);
  const auto bare = parse_tool_calls(
      ToolFormat::mistral, frame.prefix + "{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}}" + frame.suffix,
      kNames);
  CHECK(bare.calls.size() == 1);
}

TEST_CASE("the generic system prompt lists every tool and the call convention", "[tokenizer][tools]") {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
  const std::string p = tool_system_prompt(tools);
  CHECK(p.find("\"name\":\"get_weather\"") != std::string::npos);
  CHECK(p.find("<tool_call>") != std::string::npos);
  // And what it asks for is what the parser reads.
  const ToolCallFrame frame = tool_call_frame(ToolFormat::generic);
  const auto r = parse_tool_calls(ToolFormat::generic,
                                  frame.prefix + R"({"name": "get_weather", "arguments": {"city": "Lima"}})" + frame.suffix,
                                  {"get_weather"});
  CHECK(r.calls.size() == 1);
}

TEST_CASE("a streamed answer's text is sent until a call may begin", "[tokenizer][tools]") {
  CHECK(settled_content(ToolFormat::hermes, "Let me look.") == 12);
  CHECK(settled_content(ToolFormat::hermes, "Let me look. <tool") == 13);
  CHECK(settled_content(ToolFormat::hermes, "Let me look. <tool_call>{\"na") == 13);
  CHECK(settled_content(ToolFormat::hermes, "a < b and c <") == 12);
  CHECK(settled_content(ToolFormat::hermes, "a < b") == 5);
  CHECK(settled_content(ToolFormat::llama3, "  ") == 0);
  CHECK(settled_content(ToolFormat::llama3, " {\"name\"") == 0);
  CHECK(settled_content(ToolFormat::llama3, "<|python") == 0);
  CHECK(settled_content(ToolFormat::llama3, "Sure, {") == 7);
  CHECK(settled_content(ToolFormat::mistral, "[TOOL") == 0);
  CHECK(settled_content(ToolFormat::mistral, "The answer") == 10);
}
