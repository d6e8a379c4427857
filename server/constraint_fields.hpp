#pragma once
// Structured-output fields of a request body, into a ConstraintSpec:
// - OpenAI's response_format: {"type": "text"} (none), {"type":
//   "json_object"} (any JSON object or array), {"type": "json_schema",
//   "json_schema": {"name": str, "schema": {...}, "strict": bool,
//   "description": str}} (a schema; without one, any JSON);
// - SGLang's sampling_params.regex / .ebnf / .json_schema (the schema as a
//   JSON string), at most one of them.
// A schema, regex or grammar may be at most kMaxConstraintBytes long; whether
// it compiles is known only when the request reaches the engine.

#include <cstddef>
#include <optional>

#include "grammar/constraint.hpp"
#include "server/api_error.hpp"
#include "server/json_reader.hpp"

namespace actorlm::api {

inline constexpr size_t kMaxConstraintBytes = 64 * 1024;

std::optional<ApiError> read_response_format(const FieldReader& body, ConstraintSpec& out);
std::optional<ApiError> read_sglang_constraint(const FieldReader& sampling_params, ConstraintSpec& out);

}  // namespace actorlm::api
