#pragma once
// Shared by the request-parser tests: the three routes, a minimal valid body
// for each with fields spliced in, and checks that a parse neither throws nor
// answers otherwise than expected.

#include <catch2/catch.hpp>
#include <string>
#include <variant>

#include "server/openai_api.hpp"

namespace actorlm::test {

using api::ApiError;
using api::ParsedRequest;

enum class Route { chat, completion, generate };
inline constexpr Route kRoutes[] = {Route::chat, Route::completion, Route::generate};
inline const std::string kModel = "smollm2";

inline const char* name_of(Route r) {
  return r == Route::chat ? "chat" : r == Route::completion ? "completion" : "generate";
}

inline std::variant<ParsedRequest, ApiError> parse(Route route, const std::string& body) {
  if (route == Route::generate) return api::parse_generate_request(body, kModel);
  return api::parse_request(body, route == Route::chat, kModel);
}

// A minimal valid body for `route` plus `top` (JSON members, e.g.
// `"stream": true`) at the top level and `sampling` where the route takes
// generation fields (the top level, or /generate's sampling_params).
inline std::string body_of(Route route, const std::string& sampling, const std::string& top = "") {
  std::string members = route == Route::chat ? R"("messages": [{"role": "user", "content": "hi"}])"
                        : route == Route::completion ? R"("prompt": "hi")"
                                                     : R"("text": "hi")";
  if (!top.empty()) members += ", " + top;
  if (route == Route::generate) {
    members += R"(, "sampling_params": {)" + sampling + "}";
  } else if (!sampling.empty()) {
    members += ", " + sampling;
  }
  return "{" + members + "}";
}

inline ApiError refused(Route route, const std::string& body) {
  INFO(name_of(route) << " body (first 200 bytes): " << body.substr(0, 200));
  std::variant<ParsedRequest, ApiError> r;
  REQUIRE_NOTHROW(r = parse(route, body));
  REQUIRE(std::holds_alternative<ApiError>(r));
  const ApiError e = std::get<ApiError>(r);
  REQUIRE_NOTHROW(e.body().dump());  // strict dump: throws on invalid UTF-8
  return e;
}

inline ParsedRequest accepted(Route route, const std::string& body) {
  INFO(name_of(route) << " body (first 200 bytes): " << body.substr(0, 200));
  std::variant<ParsedRequest, ApiError> r;
  REQUIRE_NOTHROW(r = parse(route, body));
  if (const auto* e = std::get_if<ApiError>(&r)) FAIL("refused: " << e->message);
  return std::get<ParsedRequest>(r);
}

inline void require_400(Route route, const std::string& body, const std::string& param) {
  const ApiError e = refused(route, body);
  INFO(e.message);
  CHECK(e.status == 400);
  CHECK(e.type == "invalid_request_error");
  CHECK(e.param == param);
}

inline std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}
inline std::string nested_objects(size_t depth) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += R"({"a":)";
  return s + "1" + std::string(depth, '}');
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace actorlm::test
