// Fuzzes what the HTTP server does with a client's bytes before any handler
// runs: Beast's request parser under the limits a Connection sets
// (server/http_connection.cpp: header and body limits, one parser per
// pipelined request, input arriving in pieces), then the header screen's
// pure checks on what it parsed (server/http_guard.hpp, the route table).
// Contract: a parse error or a request, never a crash or a report; a routed
// path is a plain origin-form path; the API key matches only when the
// Authorization header is exactly "Bearer <key>".
//
// Input: byte 0 sets the piece size the bytes arrive in (1 + byte 0 % 64);
// the rest is the byte stream from the socket.

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_guard.hpp"
#include "server/http_routes.hpp"

namespace bhttp = boost::beast::http;
using namespace actorlm;

namespace {

constexpr std::string_view kKey = "fuzz-key-0123";

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

// The screen's checks on one parsed header; abort() where a promise breaks.
void screen(const bhttp::request_header<>& h) {
  const std::string_view target = view(h.target());
  if (auto path = http::route_path(target)) {
    if (path->empty() || path->front() != '/' || target.substr(0, path->size()) != *path) std::abort();
    for (unsigned char c : *path) {
      if (c < 0x21 || c == 0x7f || c == '%') std::abort();
    }
    if (path->find("/../") != std::string_view::npos || path->find("/./") != std::string_view::npos) std::abort();
    (void)http::find_route(*path);
  }
  const std::string_view auth = view(h[bhttp::field::authorization]);
  const bool matches = http::bearer_matches(auth, kKey);
  if (matches != (auth == std::string("Bearer ") + std::string(kKey))) std::abort();
  const std::string_view host = view(h[bhttp::field::host]);
  (void)http::host_allowed(host, {"example.test"});
  if (auto name = http::host_name(host)) {
    for (char c : *name) {
      if (c >= 'A' && c <= 'Z') std::abort();  // promised lower case
    }
  }
  (void)http::is_json_media_type(view(h[bhttp::field::content_type]));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string buffer;  // what arrived and the parser has not consumed
  std::optional<bhttp::request_parser<bhttp::string_body>> parser;
  auto fresh = [&] {
    parser.emplace();
    parser->header_limit(2048);
    parser->body_limit(4096);
  };
  fresh();
  bool screened = false;
  size_t at = 0;
  while (true) {
    if (at < stream.size()) {
      const size_t n = std::min(piece, stream.size() - at);
      buffer.append(stream.substr(at, n));
      at += n;
    }
    bool progress = true;
    while (progress && !buffer.empty()) {
      boost::beast::error_code ec;
      const size_t used = parser->put(boost::asio::buffer(buffer), ec);
      if (used > buffer.size()) std::abort();
      buffer.erase(0, used);
      if (ec == bhttp::error::need_more) break;
      if (ec) return 0;  // the connection answers 4xx and closes
      if (!screened && parser->is_header_done()) {
        screened = true;
        screen(parser->get().base());
      }
      if (parser->is_done()) {
        const auto request = parser->release();
        if (request.body().size() > 4096) std::abort();
        fresh();
        screened = false;
      }
      progress = used > 0;
    }
    if (at >= stream.size()) break;
  }
  return 0;
}
