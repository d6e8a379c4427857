#pragma once
// HTTP/1.1 responses as bytes: a whole response with Content-Length, or the
// head and chunks of a chunked stream (server-sent events). Kept apart from
// the connection so the framing is tested on its own.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actorlm::http {

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond the framing ones

  static Response json(int status, std::string body) {
    return {status, "application/json", std::move(body), {}};
  }
};

// The complete response. keep_alive false adds "Connection: close".
std::string serialize(const Response& r, bool keep_alive);

// The head of a chunked 200 response; the body follows as chunk()s and
// ends with last_chunk.
std::string stream_head(std::string_view content_type,
                        const std::vector<std::pair<std::string, std::string>>& headers,
                        bool keep_alive);
std::string chunk(std::string_view data);
inline constexpr std::string_view last_chunk = "0\r\n\r\n";

// The reason phrase for a status code ("Not Found").
std::string_view reason(int status);

}  // namespace actorlm::http
