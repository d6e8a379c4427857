#pragma once
// The HTTP server's routes, declared once. The server dispatches on this
// table, its header screen asks for the API key on every route not marked
// open, and `actorlm serve --list-routes` prints it, so the auth test
// (tests/server/auth_matrix_test.py) checks every route there is rather
// than a list kept by hand beside it.

#include <boost/beast/http/verb.hpp>
#include <span>
#include <string_view>

namespace actorlm::http {

enum class RouteId {
  page, script, health, models, metrics, nodes, chat, completion, native, tokenize, detokenize, node_drain, node_undrain,
  lora_load, lora_unload
};

struct Route {
  // A "{id}" segment matches any one non-empty segment (route_param reads it).
  std::string_view path;
  boost::beast::http::verb method;
  RouteId id;
  bool open;  // served without the API key
};

std::span<const Route> routes();
// The route for a path (no query), or nullptr: every segment equal, but a
// "{id}" segment, which takes any one.
const Route* find_route(std::string_view path);
// What `path` has where its route has "{id}" (empty when it has none).
std::string_view route_param(const Route& route, std::string_view path);

}  // namespace actorlm::http
