// The gate in front of a node's middleman, without CAF: its handshake between
// a dialer and an acceptor (right and wrong secret), the BASP frame meter and
// the request seals that bind a head's requests to its join.

#include "cluster/transport/tcp_gate.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "cluster/transport/basp_frame_meter.hpp"
#include "cluster/transport/request_session.hpp"

using namespace actorlm;

namespace {

// A loopback echo server for one connection; returns its port.
uint16_t start_echo(std::thread& t) {
  int l = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(l, 4) == 0);
  socklen_t len = sizeof a;
  ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  t = std::thread([l] {
    int c = ::accept(l, nullptr, nullptr);
    char buf[256];
    ssize_t n;
    while (c >= 0 && (n = ::recv(c, buf, sizeof buf, 0)) > 0) ::send(c, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
    if (c >= 0) ::close(c);
    ::close(l);
  });
  return ntohs(a.sin_port);
}

int dial(uint16_t port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  REQUIRE(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{5, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return s;
}

GateConfig gate(GateSide side, const std::string& secret, uint16_t target) {
  GateConfig g;
  g.side = side;
  g.secret = secret;
  g.target_host = "127.0.0.1";
  g.target_port = target;
  g.handshake_timeout = std::chrono::milliseconds(2000);
  return g;
}

}  // namespace

TEST_CASE("Gates with the same secret relay both ways, a wrong secret is refused", "[actors][cluster]") {
  std::thread echo;
  const uint16_t echo_port = start_echo(echo);
  TcpGate acceptor(gate(GateSide::acceptor, "s3cret", echo_port));
  SECTION("same secret") {
    TcpGate dialer(gate(GateSide::dialer, "s3cret", acceptor.port()));
    int s = dial(dialer.port());
    const char msg[] = "sent before the handshake ends";
    REQUIRE(::send(s, msg, sizeof msg, 0) == static_cast<ssize_t>(sizeof msg));
    char back[sizeof msg] = {};
    size_t got = 0;
    while (got < sizeof msg) {
      ssize_t n = ::recv(s, back + got, sizeof msg - got, 0);
      REQUIRE(n > 0);
      got += static_cast<size_t>(n);
    }
    CHECK(std::memcmp(msg, back, sizeof msg) == 0);
    CHECK(dialer.last_failure().empty());
    ::close(s);
  }
  SECTION("a head's gate relays for its own process only") {
    TcpGate dialer(gate(GateSide::dialer, "s3cret", acceptor.port()));
    const uint16_t port = dialer.port();
    pid_t child = ::fork();
    if (child == 0) {  // another process: closed at once, nothing relayed
      int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(port);
      char b;
      bool closed = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::send(s, "x", 1, MSG_NOSIGNAL) >= 0 &&
                    ::recv(s, &b, 1, 0) <= 0;
      ::_exit(closed ? 0 : 1);
    }
    int status = -1;
    ::waitpid(child, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    int unblock = dial(echo_port);
    ::close(unblock);
  }
  SECTION("wrong secret") {
    TcpGate dialer(gate(GateSide::dialer, "guess", acceptor.port()));
    int s = dial(dialer.port());
    char b;
    CHECK(::recv(s, &b, 1, 0) == 0);  // closed, nothing relayed
    CHECK(dialer.last_failure().find("shared secret does not match") != std::string::npos);
    ::close(s);
    int unblock = dial(echo_port);  // lets the echo thread finish
    ::close(unblock);
  }
  echo.join();
}

TEST_CASE("The frame meter refuses a BASP header announcing more than its bound", "[actors][cluster]") {
  BaspFrameMeter meter(100);
  uint8_t header[32] = {};
  header[7] = 100;  // payload_len 100: allowed
  std::vector<uint8_t> stream(header, header + 32);
  stream.resize(stream.size() + 100, 0xAB);
  uint8_t big[32] = {};
  big[4] = 0xFF, big[5] = 0xFF, big[6] = 0xFF, big[7] = 0xFF;
  stream.insert(stream.end(), big, big + 32);
  for (size_t i = 0; i + 1 < stream.size(); ++i) REQUIRE(meter.feed(&stream[i], 1));  // byte by byte
  CHECK_FALSE(meter.feed(&stream.back(), 1));
  CHECK(meter.oversized() == 0xFFFFFFFFull);
}

TEST_CASE("Sealed requests open once, under their key and kind only", "[actors][cluster]") {
  std::vector<uint8_t> key(32, 7);
  RequestSession head(key), node(key), other(std::vector<uint8_t>(32, 8));
  const std::vector<uint8_t> payload{1, 2, 3};
  auto a = head.seal(RequestKind::generate, payload);
  auto b = head.seal(RequestKind::generate, payload);
  CHECK_FALSE(other.open(RequestKind::generate, a));
  CHECK_FALSE(node.open(RequestKind::abort, a));
  auto opened = node.open(RequestKind::generate, a);
  REQUIRE(opened);
  CHECK(*opened == payload);
  CHECK_FALSE(node.open(RequestKind::generate, a));  // replayed
  auto tampered = b;
  tampered.back() ^= 1;
  CHECK_FALSE(node.open(RequestKind::generate, tampered));
  CHECK(node.open(RequestKind::generate, b));
  CHECK_FALSE(RequestSession().open(RequestKind::generate, b));
}
