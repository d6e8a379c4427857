#include "server/http_guard.hpp"

#include <algorithm>
#include <cctype>

namespace actorlm::http {

namespace {

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

bool equal_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

}  // namespace

bool bearer_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view scheme = "Bearer ";
  if (authorization.size() != scheme.size() + key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < scheme.size(); ++i)
    diff |= static_cast<unsigned char>(authorization[i] ^ scheme[i]);
  for (size_t i = 0; i < key.size(); ++i)
    diff |= static_cast<unsigned char>(authorization[scheme.size() + i] ^ key[i]);
  return diff == 0;
}

std::optional<std::string> host_name(std::string_view h) {
  std::string_view name = h;
  if (!h.empty() && h.front() == '[') {  // IPv6 literal
    const size_t close = h.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    name = h.substr(1, close - 1);
    std::string_view rest = h.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || rest.size() == 1)) return std::nullopt;
    if (!rest.empty())
      h = rest;  // checked below as a port
    else
      h = {};
  } else {
    const size_t colon = h.find(':');
    name = h.substr(0, colon);
    h = colon == std::string_view::npos ? std::string_view{} : h.substr(colon);
    if (h.size() == 1) return std::nullopt;
  }
  if (!h.empty()) {  // ":port"
    if (h.size() > 6) return std::nullopt;
    for (char c : h.substr(1)) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    }
  }
  if (name.empty() || name.size() > 255) return std::nullopt;
  std::string out;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (!(std::isalnum(u) || c == '.' || c == '-' || c == ':' || c == '_')) return std::nullopt;
    out += lower(c);
  }
  if (out.back() == '.') out.pop_back();  // "localhost." names the same host
  return out;
}

bool host_allowed(std::string_view host_header, const std::vector<std::string>& allowed) {
  auto name = host_name(host_header);
  if (!name) return false;
  if (*name == "localhost" || name->ends_with(".localhost")) return true;
  if (name->find(':') != std::string::npos) return true;  // an IPv6 literal (brackets removed)
  int dots = 0;
  bool ipv4 = true;
  for (char c : *name) {
    if (c == '.')
      ++dots;
    else if (!std::isdigit(static_cast<unsigned char>(c)))
      ipv4 = false;
  }
  if (ipv4 && dots == 3) return true;
  return std::any_of(allowed.begin(), allowed.end(),
                     [&](const std::string& a) { return equal_nocase(*name, a); });
}

std::optional<std::string_view> route_path(std::string_view target) {
  if (target.empty() || target.front() != '/' || target.size() > 2048) return std::nullopt;
  std::string_view path = target.substr(0, target.find('?'));
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '%' || c == '\\' || u < 0x21 || u >= 0x7f) return std::nullopt;
  }
  if (path.find("/./") != std::string_view::npos || path.find("/../") != std::string_view::npos ||
      path.ends_with("/.") || path.ends_with("/..") || path.find("//") != std::string_view::npos) {
    return std::nullopt;
  }
  return path;
}

bool is_json_media_type(std::string_view ct) {
  std::string_view type = ct.substr(0, ct.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  return equal_nocase(type, "application/json");
}

}  // namespace actorlm::http
