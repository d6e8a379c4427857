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

enum class RouteId { page, script, health, models, metrics, nodes, chat, completion, native, tokenize, detokenize };

struct Route {
  std::string_view path;
  boost::beast::http::verb method;
  RouteId id;
  bool open;  // served without the API key
};

std::span<const Route> routes();
// The route for an exact path (no query), or nullptr.
const Route* find_route(std::string_view path);

}  // namespace actorlm::http
