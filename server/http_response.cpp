#include "server/http_response.hpp"

#include <cstdio>

namespace actorlm::http {

std::string_view reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return status < 500 ? "Client Error" : "Server Error";
  }
}

namespace {

std::string head(int status, std::string_view content_type,
                 const std::vector<std::pair<std::string, std::string>>& headers, bool keep_alive) {
  std::string out =
      "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason(status)) + "\r\n";
  out += "Server: actorlm\r\n";
  if (!content_type.empty()) out += "Content-Type: " + std::string(content_type) + "\r\n";
  for (const auto& [name, value] : headers) out += name + ": " + value + "\r\n";
  if (!keep_alive) out += "Connection: close\r\n";
  return out;
}

}  // namespace

std::string serialize(const Response& r, bool keep_alive) {
  std::string out = head(r.status, r.content_type, r.headers, keep_alive);
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n";
  out += r.body;
  return out;
}

std::string stream_head(std::string_view content_type,
                        const std::vector<std::pair<std::string, std::string>>& headers,
                        bool keep_alive) {
  return head(200, content_type, headers, keep_alive) + "Transfer-Encoding: chunked\r\n\r\n";
}

std::string chunk(std::string_view data) {
  if (data.empty()) return {};  // an empty chunk would end the stream
  char size[20];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out = size;
  out += data;
  out += "\r\n";
  return out;
}

}  // namespace actorlm::http
