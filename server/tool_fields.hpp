#pragma once
// OpenAI function calling on /v1/chat/completions:
//   tools: [{"type": "function", "function": {"name", "description",
//          "parameters" (JSON Schema), "strict"}}], at most 128, names of
//          1-64 characters from [A-Za-z0-9_-], distinct;
//   tool_choice: "none" (tools are not shown and no calls are read), "auto"
//          (shown; calls in the answer are read back), "required" (the
//          answer is one call, constrained to a defined function and its
//          parameters' schema), or {"type": "function", "function":
//          {"name"}} (one call to that function); default "auto" with
//          tools, "none" without;
//   parallel_tool_calls: false keeps only the first call read back.
// Assistant turns may carry tool_calls (then content may be null) and
// "tool" turns answer one by tool_call_id.

#include <optional>
#include <string>
#include <vector>

#include "grammar/constraint.hpp"
#include "server/api_error.hpp"
#include "server/json_reader.hpp"
#include "tokenizer/tool_calls.hpp"

namespace actorlm::api {

enum class ToolChoice { none, automatic, required, named };

struct ToolRequest {
  std::string tools;  // the validated list as JSON text; empty: none
  std::vector<std::string> names;
  std::vector<std::string> parameters;  // each function's parameters schema as JSON text
  ToolChoice choice = ToolChoice::none;
  std::string named;  // ToolChoice::named: the function
  bool parallel = true;

  // Whether the answer is read back for calls.
  bool reads_calls() const { return choice != ToolChoice::none; }
};

std::optional<ApiError> read_tools(const FieldReader& body, ToolRequest& out);

// required / named: the constraint that makes the answer one well-formed
// call in `format`.
ConstraintSpec tool_call_constraint(const ToolRequest& r, ToolFormat format);

// An assistant turn's tool_calls, validated, as JSON text ("" when absent).
std::optional<ApiError> read_assistant_tool_calls(const FieldReader& message, std::string& out);

}  // namespace actorlm::api
