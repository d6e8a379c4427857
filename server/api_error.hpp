#pragma once
// A refused or failed API request: the HTTP status and OpenAI's error object
// ({"error": {"message", "type", "param", "code"}}).

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace actorlm::api {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, if any ("sampling_params.top_k")
  int retry_after = 0;  // > 0: a Retry-After header of this many seconds (429, 503)
  nlohmann::json body() const;
};

// A 400 invalid_request_error naming `param`.
ApiError bad_request(std::string param, std::string message);

// How a piece of client input appears inside an error message: quoted and cut
// to at most kEchoBytes bytes (then "...") on a UTF-8 character boundary, so a
// 1 MB model name costs a ~70-byte error and valid UTF-8 stays valid.
inline constexpr size_t kEchoBytes = 64;
std::string echo(std::string_view client_text);

}  // namespace actorlm::api
