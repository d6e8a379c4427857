#include "cluster/transport/remote_security.hpp"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace actorlm {
namespace {

bool loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

std::string RemoteSecurity::check(const std::string& host) const {
  if (tls()) {
    if (tls_cert.empty() || tls_key.empty() || tls_ca.empty()) {
      return "TLS needs all three of a certificate, its key and the CA that signs the peers (--tls-cert, --tls-key, --tls-ca)";
    }
    for (const auto& f : {tls_cert, tls_key, tls_ca}) {
      if (!std::filesystem::is_regular_file(f)) return "TLS file not found: " + f;
    }
  } else if (!loopback(host) && !allow_plain_remote) {
    return "plain TCP to or from " + host +
           " is refused: use TLS (--tls-cert, --tls-key, --tls-ca), or --allow-plain-remote on a network you trust";
  }
  if (!tls() && secret.empty()) {
    return "a node without TLS needs a shared secret (--secret-file), so that an unknown peer cannot join";
  }
  return "";
}

std::string read_secret_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read secret file " + path);
  std::ostringstream s;
  s << in.rdbuf();
  std::string secret = s.str();
  if (secret.size() > 4096) throw std::runtime_error("secret file " + path + " is over 4 KiB");
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  if (secret.empty()) throw std::runtime_error("secret file " + path + " is empty");
  return secret;
}

NodeAddress parse_node_address(const std::string& text) {
  auto bad = [&](const char* why) { return std::invalid_argument("bad node address '" + text + "': " + why); };
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) throw bad("expected host:port");
  NodeAddress a;
  a.host = text.substr(0, colon);
  if (a.host.front() == '[') {
    if (a.host.back() != ']' || a.host.size() < 3) throw bad("unbalanced brackets");
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  unsigned port = 0;
  auto [end, ec] = std::from_chars(first, last, port);
  if (ec != std::errc() || end != last || port == 0 || port > 65535) throw bad("port must be 1..65535");
  a.port = static_cast<uint16_t>(port);
  return a;
}

}  // namespace actorlm
