// Response framing: what a client parses must match what was meant.
#include "server/http_response.hpp"

#include <catch2/catch.hpp>

using namespace actorlm::http;

TEST_CASE("serialize frames a whole response", "[server]") {
  Response r = Response::json(404, R"({"a":1})");
  r.headers.push_back({"X-Test", "yes"});
  const std::string keep = serialize(r, true);
  CHECK(keep.rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);
  CHECK(keep.find("Content-Type: application/json\r\n") != std::string::npos);
  CHECK(keep.find("X-Test: yes\r\n") != std::string::npos);
  CHECK(keep.find("Connection: close") == std::string::npos);
  CHECK(keep.size() >= 7);
  CHECK(keep.substr(keep.size() - 7) == R"({"a":1})");
  CHECK(keep.find("Content-Length: 7\r\n\r\n{") != std::string::npos);
  const std::string close = serialize(r, false);
  CHECK(close.find("Connection: close\r\n") != std::string::npos);
  CHECK(serialize(Response::json(431, ""), true)
            .rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0) == 0);
}

TEST_CASE("chunked stream framing", "[server]") {
  const std::string head = stream_head("text/event-stream", {{"Cache-Control", "no-cache"}}, true);
  CHECK(head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(head.find("Transfer-Encoding: chunked\r\n") != std::string::npos);
  CHECK(head.find("Content-Length") == std::string::npos);
  CHECK(head.substr(head.size() - 4) == "\r\n\r\n");
  CHECK(chunk("hello") == "5\r\nhello\r\n");
  CHECK(chunk(std::string(300, 'x')).rfind("12c\r\n", 0) == 0);
  CHECK(chunk("").empty());  // never an early terminator
  CHECK(last_chunk == "0\r\n\r\n");
}
