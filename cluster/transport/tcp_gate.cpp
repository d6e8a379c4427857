#include "cluster/transport/tcp_gate.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cluster/transport/basp_frame_meter.hpp"
#include "cluster/transport/tcp_socket.hpp"

namespace actorlm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char magic[8] = {'A', 'L', 'M', 'G', 'A', 'T', 'E', '1'};
constexpr size_t hello_bytes = sizeof(magic) + nonce_bytes;
constexpr size_t pipe_capacity = 64 * 1024;
constexpr uint8_t status_accepted = 0;

// Bytes on their way from one socket to the other, at most pipe_capacity.
// Allocated by open() once a connection may carry relayed bytes, so a
// connection still authenticating costs no buffer.
struct Pipe {
  std::vector<uint8_t> data;
  size_t begin = 0, end = 0;
  void open() { data.resize(pipe_capacity); }
  size_t space() const { return data.size() - end; }
  bool empty() const { return begin == end; }
  void append(const std::vector<uint8_t>& bytes) {
    std::copy(bytes.begin(), bytes.end(), data.begin() + static_cast<std::ptrdiff_t>(end));
    end += bytes.size();
  }
};

enum class Stage { connecting, handshake, relay };

struct Conn {
  int remote = -1;  // the other machine's side: authenticated by the handshake
  int local = -1;   // this machine's side: CAF (dialer), the middleman (acceptor, after the handshake)
  Stage stage = Stage::handshake;
  int step = 0;
  std::vector<uint8_t> mine, theirs;   // nonces
  std::array<uint8_t, hello_bytes> in{};  // the handshake message being read
  size_t in_have = 0;
  std::vector<uint8_t> out;  // handshake bytes not yet sent
  Pipe to_remote, to_local;
  BaspFrameMeter meter{0};
  Clock::time_point deadline;
  bool close_when_sent = false;  // a refusal: say why, then close
  bool dead = false;
};

}  // namespace

struct TcpGate::Impl {
  GateConfig config;
  int listener = -1;
  int wake[2] = {-1, -1};
  uint16_t port = 0;
  std::list<Conn> conns;
  mutable std::mutex failure_mutex;
  std::string failure;
  std::thread thread;

  void log(const std::string& what) { std::fprintf(stderr, "actorlm %s: %s\n", config.label.c_str(), what.c_str()); }
  void set_failure(const std::string& why) {
    std::lock_guard<std::mutex> lock(failure_mutex);
    failure = why;
  }
  bool acceptor() const { return config.side == GateSide::acceptor; }

  size_t expected(const Conn& c) const {
    if (acceptor()) return c.step == 0 ? hello_bytes : proof_bytes;
    return c.step == 0 ? hello_bytes : c.step == 1 ? 1 : proof_bytes;
  }

  void start_handshake(Conn& c) {  // dialer, once its connection to the node is up
    c.stage = Stage::handshake;
    c.mine = make_nonce();
    c.out.assign(magic, magic + sizeof magic);
    c.out.insert(c.out.end(), c.mine.begin(), c.mine.end());
  }

  // A complete handshake message is in c.in: answer it, refuse, or start relaying.
  void on_message(Conn& c) {
    const uint8_t* m = c.in.data();
    const size_t n = c.in_have;
    c.in_have = 0;
    if (c.step == 0) {
      if (!std::equal(magic, magic + sizeof magic, m)) {
        if (!acceptor()) set_failure("the node's port does not speak the actorlm gate handshake");
        log("closed a connection from " + peer_name(c.remote) + ": not an actorlm gate handshake");
        c.dead = true;
        return;
      }
      c.theirs.assign(m + sizeof magic, m + n);
      if (acceptor()) {
        c.mine = make_nonce();
        c.out.assign(magic, magic + sizeof magic);
        c.out.insert(c.out.end(), c.mine.begin(), c.mine.end());
      } else {
        c.out = gate_proof(config.secret, GateSide::dialer, c.mine, c.theirs);
      }
      c.step = 1;
      return;
    }
    const std::vector<uint8_t> got(m, m + n);
    if (acceptor()) {  // step 1: the dialer's proof
      if (!macs_equal(got, gate_proof(config.secret, GateSide::dialer, c.theirs, c.mine))) {
        log("refused a head: the shared secret does not match (gate, from " + peer_name(c.remote) + ")");
        c.out = {1};
        c.close_when_sent = true;
        return;
      }
      std::string error;
      c.local = open_socket(config.target_host, config.target_port, false, error);
      if (c.local < 0) {
        log("cannot reach the middleman behind the gate: " + error);
        c.dead = true;
        return;
      }
      c.out = {status_accepted};
      std::vector<uint8_t> proof = gate_proof(config.secret, GateSide::acceptor, c.theirs, c.mine);
      c.out.insert(c.out.end(), proof.begin(), proof.end());
      c.to_remote.open();
      c.to_local.open();
      c.to_remote.append(c.out);  // first bytes of the relay, before the middleman's
      c.out.clear();
      c.stage = Stage::relay;
      return;
    }
    if (c.step == 1) {  // dialer: the acceptor's verdict
      if (got[0] != status_accepted) {
        set_failure("the shared secret does not match (refused by the node's gate)");
        c.dead = true;
        return;
      }
      c.step = 2;
      return;
    }
    if (!macs_equal(got, gate_proof(config.secret, GateSide::acceptor, c.mine, c.theirs))) {
      set_failure("the node did not prove it knows the shared secret");
      c.dead = true;
      return;
    }
    set_failure("");
    c.to_local.open();
    c.stage = Stage::relay;
  }

  // Moves bytes from `from` into `pipe`; the remote side's bytes pass the meter.
  void pull(Conn& c, int from, Pipe& pipe) {
    ssize_t got = ::recv(from, pipe.data.data() + pipe.end, pipe.space(), 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      c.dead = true;
      return;
    }
    if (got < 0) return;
    if (from == c.remote && config.max_frame_payload > 0 &&
        !c.meter.feed(pipe.data.data() + pipe.end, static_cast<size_t>(got))) {
      log("closed a connection from " + peer_name(c.remote) + ": a message of " + std::to_string(c.meter.oversized()) +
          " bytes is over --max-message-bytes " + std::to_string(config.max_frame_payload));
      c.dead = true;
      return;
    }
    pipe.end += static_cast<size_t>(got);
  }

  void push(Conn& c, int to, Pipe& pipe) {
    if (pipe.empty() || to < 0) return;
    ssize_t sent = ::send(to, pipe.data.data() + pipe.begin, pipe.end - pipe.begin, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.dead = true;
      return;
    }
    pipe.begin += static_cast<size_t>(sent);
    if (pipe.begin == pipe.end) pipe.begin = pipe.end = 0;
  }

  void handshake_io(Conn& c, short revents) {
    if (!c.out.empty() && (revents & POLLOUT)) {
      ssize_t sent = ::send(c.remote, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        c.dead = true;
        return;
      }
      if (sent > 0) c.out.erase(c.out.begin(), c.out.begin() + sent);
      if (c.out.empty() && c.close_when_sent) c.dead = true;
      return;
    }
    if (!c.out.empty() || !(revents & (POLLIN | POLLHUP | POLLERR))) return;
    ssize_t got = ::recv(c.remote, c.in.data() + c.in_have, expected(c) - c.in_have, 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      if (!acceptor()) set_failure("the node's gate closed the connection during the handshake");
      c.dead = true;
      return;
    }
    if (got < 0) return;
    c.in_have += static_cast<size_t>(got);
    if (c.in_have == expected(c)) on_message(c);
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      set_socket_options(fd);
      size_t unauthenticated = 0;
      for (const Conn& c : conns) unauthenticated += c.stage != Stage::relay;
      if (unauthenticated >= config.max_unauthenticated) {
        log("closed a connection from " + peer_name(fd) + ": " + std::to_string(unauthenticated) +
            " connections are already authenticating");
        ::close(fd);
        continue;
      }
      if (!acceptor() && !peer_is_this_process(fd)) {
        log("closed a connection from " + peer_name(fd) + ": only this process may dial through its gate");
        ::close(fd);
        continue;
      }
      Conn& c = conns.emplace_back();
      c.meter = BaspFrameMeter(config.max_frame_payload);
      c.deadline = Clock::now() + config.handshake_timeout;
      if (acceptor()) {
        c.remote = fd;
        continue;
      }
      c.local = fd;
      c.to_remote.open();  // CAF's first bytes wait here until the node is authenticated
      std::string error;
      c.remote = open_socket(config.target_host, config.target_port, false, error);
      c.stage = Stage::connecting;
      if (c.remote < 0) {
        set_failure("cannot reach " + config.target_host + ":" + std::to_string(config.target_port) + ": " + error);
        c.dead = true;
      }
    }
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Conn*, bool>> owners;  // per pollfd after the first two: (connection, is its remote side)
    for (;;) {
      fds.assign({{wake[0], POLLIN, 0}, {listener, POLLIN, 0}});
      owners.clear();
      auto wait = std::chrono::milliseconds(1000);
      const auto now = Clock::now();
      for (Conn& c : conns) {
        short r = 0, l = 0;
        if (c.stage == Stage::connecting) {
          r = POLLOUT;
        } else if (c.stage == Stage::handshake) {
          r = c.out.empty() ? POLLIN : POLLOUT;
          if (c.to_remote.space() > 0) l = POLLIN;  // a dialer holds CAF's first bytes until the relay starts
        } else {
          r = static_cast<short>((c.to_local.space() > 0 ? POLLIN : 0) | (c.to_remote.empty() ? 0 : POLLOUT));
          l = static_cast<short>((c.to_remote.space() > 0 ? POLLIN : 0) | (c.to_local.empty() ? 0 : POLLOUT));
        }
        if (c.stage != Stage::relay) {
          wait = std::min(wait, std::max(std::chrono::milliseconds(0),
                                         std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now)));
        }
        fds.push_back({c.remote, r, 0});
        owners.emplace_back(&c, true);
        if (c.local >= 0) {
          fds.push_back({c.local, l, 0});
          owners.emplace_back(&c, false);
        }
      }
      if (::poll(fds.data(), fds.size(), static_cast<int>(wait.count()) + 1) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;  // the destructor asks to stop
      for (size_t i = 2; i < fds.size(); ++i) {
        auto [c, is_remote] = owners[i - 2];
        const short ev = fds[i].revents;
        if (!ev || c->dead) continue;
        if (c->stage == Stage::connecting) {
          if (!is_remote) continue;  // CAF's side waits until the node answers
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(c->remote, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            set_failure("cannot reach " + config.target_host + ":" + std::to_string(config.target_port) + ": " +
                        std::strerror(err));
            c->dead = true;
          } else {
            start_handshake(*c);
          }
        } else if (c->stage == Stage::handshake) {
          if (is_remote) {
            handshake_io(*c, ev);
          } else {
            pull(*c, c->local, c->to_remote);
          }
        } else if (is_remote) {
          if (ev & POLLOUT) push(*c, c->remote, c->to_remote);
          if (ev & (POLLIN | POLLHUP | POLLERR)) pull(*c, c->remote, c->to_local);
          push(*c, c->local, c->to_local);  // at once: one poll round less per message
        } else {
          if (ev & POLLOUT) push(*c, c->local, c->to_local);
          if (ev & (POLLIN | POLLHUP | POLLERR)) pull(*c, c->local, c->to_remote);
          push(*c, c->remote, c->to_remote);
        }
      }
      if (fds[1].revents) accept_all();
      const auto later = Clock::now();
      for (auto it = conns.begin(); it != conns.end();) {
        if (!it->dead && it->stage != Stage::relay && later >= it->deadline) {
          if (!acceptor()) set_failure("the node's gate did not complete the handshake in time");
          log("closed a connection: no gate handshake within " + std::to_string(config.handshake_timeout.count()) + " ms");
          it->dead = true;
        }
        if (it->dead) {
          ::close(it->remote);
          if (it->local >= 0) ::close(it->local);
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
};

TcpGate::TcpGate(GateConfig config) : impl_(std::make_unique<Impl>()) {
  if (config.secret.empty()) throw std::invalid_argument("a gate needs a shared secret");
  auto& m = *impl_;
  m.config = std::move(config);
  std::string error;
  m.listener = open_socket(m.config.listen_host, m.config.listen_port, true, error);
  if (m.listener < 0) {
    throw std::runtime_error("cannot listen on " + m.config.listen_host + ":" + std::to_string(m.config.listen_port) + ": " +
                             error);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(m.listener, reinterpret_cast<sockaddr*>(&ss), &len);
  m.port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(m.wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    ::close(m.listener);
    throw std::runtime_error("cannot create the gate's wake pipe");
  }
  m.thread = std::thread([&m] { m.run(); });
}

TcpGate::~TcpGate() {
  auto& m = *impl_;
  const char stop = 1;
  (void)!::write(m.wake[1], &stop, 1);
  m.thread.join();
  for (Conn& c : m.conns) {
    ::close(c.remote);
    if (c.local >= 0) ::close(c.local);
  }
  ::close(m.listener);
  ::close(m.wake[0]);
  ::close(m.wake[1]);
}

uint16_t TcpGate::port() const { return impl_->port; }

std::string TcpGate::last_failure() const {
  std::lock_guard<std::mutex> lock(impl_->failure_mutex);
  return impl_->failure;
}

}  // namespace actorlm
