#pragma once
// Checks made on a request's header before its body is read: the API key,
// the Host a browser claims (DNS rebinding), the request target and the
// media type. Pure functions over strings, so each rule is unit-tested
// without a socket.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorlm::http {

// Whether an Authorization header value carries exactly "Bearer <key>". The
// comparison takes the same time wherever the first difference is, so the
// key cannot be guessed a byte at a time from response times. The scheme is
// matched as written ("Bearer"), like OpenAI's servers.
bool bearer_matches(std::string_view authorization, std::string_view key);

// The host name of a Host header ("name", "name:port", "[v6]:port"), lower
// case; nullopt when the value is malformed.
std::optional<std::string> host_name(std::string_view host_header);

// Whether a keyless server should answer a request carrying this Host
// header: "localhost" names, IP literals and the names in `allowed` (the
// operator's --allowed-host). A page on another site that rebinds its own
// name to 127.0.0.1 still sends its own name here, so it is refused; an IP
// literal cannot be rebound.
bool host_allowed(std::string_view host_header, const std::vector<std::string>& allowed);

// The path of an origin-form request target ("/v1/models?x=1" gives
// "/v1/models"), or nullopt for anything the server does not route:
// absolute-form, "*", percent-encoded or dot segments, control bytes. A
// percent-encoded path is refused rather than decoded so that no two
// spellings reach one route.
std::optional<std::string_view> route_path(std::string_view target);

// Whether a Content-Type names JSON ("application/json", any parameters).
bool is_json_media_type(std::string_view content_type);

}  // namespace actorlm::http
