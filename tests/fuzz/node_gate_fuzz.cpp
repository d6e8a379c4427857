// Fuzzes a node's gate (cluster/transport/tcp_gate.hpp) over loopback TCP with the
// bytes a stranger can send to a node's public port: before the handshake,
// and, as a head that knows the secret, after it (where the gate meters the
// BASP frames it relays). Contract: without the secret no byte reaches the
// middleman behind the gate and the gate opens no connection to it; after
// the handshake the relayed bytes are a prefix of what was sent and never
// hold a whole frame header announcing a payload over the bound; the gate
// never crashes or stalls (5 s).
//
// Input: byte 0 even: the rest is sent as it is to the gate. Byte 0 odd: the
// harness first runs a dialer's handshake with the right secret, then sends
// the rest.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/transport/basp_frame_meter.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "cluster/transport/tcp_gate.hpp"
#include "cluster/transport/tcp_socket.hpp"

using namespace actorlm;

namespace {

// open_socket() gives nonblocking sockets (the gate's poll loop wants them);
// the harness waits on its own.
void make_blocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK); }

// Whether fd becomes ready for `events` within kWaitMs. libFuzzer's timer
// signal interrupts poll(): that is not the gate's doing, so wait on.
bool wait_for(int fd, short events);

const std::string kSecret = "fuzz-secret";
constexpr uint64_t kMaxPayload = 4096;
constexpr int kWaitMs = 5000;

// The middleman's stand-in: counts connections and the bytes each brought.
struct Sink {
  int listener = -1;
  uint16_t port = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<uint8_t>> received;  // one per closed connection
  std::atomic<int> accepted{0};
  std::thread thread;

  Sink() {
    std::string error;
    listener = open_socket("127.0.0.1", 0, true, error);
    if (listener < 0) std::abort();
    make_blocking(listener);
    sockaddr_in a{};
    socklen_t n = sizeof a;
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &n);
    port = ntohs(a.sin_port);
    thread = std::thread([this] { run(); });
    thread.detach();  // lives as long as the process
  }

  void run() {
    while (true) {
      int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) continue;
      ++accepted;
      std::vector<uint8_t> got;
      uint8_t buf[4096];
      ssize_t r;
      while ((r = ::recv(fd, buf, sizeof buf, 0)) > 0 || (r < 0 && errno == EINTR)) {
        if (r > 0) got.insert(got.end(), buf, buf + r);
      }
      ::close(fd);
      std::lock_guard<std::mutex> lock(mu);
      received.push_back(std::move(got));
      cv.notify_all();
    }
  }

  std::vector<uint8_t> next() {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::milliseconds(kWaitMs), [&] { return !received.empty(); })) std::abort();
    auto got = std::move(received.front());
    received.pop_front();
    return got;
  }
};

struct World {
  Sink sink;
  std::unique_ptr<TcpGate> gate;
  World() {
    GateConfig c;
    c.side = GateSide::acceptor;
    c.secret = kSecret;
    c.target_host = "127.0.0.1";
    c.target_port = sink.port;
    c.max_frame_payload = kMaxPayload;
    c.handshake_timeout = std::chrono::milliseconds(kWaitMs);
    c.label = "fuzz gate";
    gate = std::make_unique<TcpGate>(c);
  }
};

World& world() {
  static World* w = new World();  // never destroyed: the sink thread outlives main
  return *w;
}

bool send_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t s = ::send(fd, p, n, MSG_NOSIGNAL);
    if (s < 0 && errno == EINTR) continue;
    if (s <= 0) return false;  // the gate closed on us: allowed
    p += s;
    n -= static_cast<size_t>(s);
  }
  return true;
}

bool wait_for(int fd, short events) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// Reads until the gate closes the connection, or n bytes when n > 0.
std::vector<uint8_t> read_from(int fd, size_t n) {
  std::vector<uint8_t> got;
  uint8_t buf[4096];
  while (n == 0 || got.size() < n) {
    if (!wait_for(fd, POLLIN)) std::abort();  // the gate stalled
    ssize_t r = ::recv(fd, buf, n ? std::min(sizeof buf, n - got.size()) : sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got.insert(got.end(), buf, buf + r);
  }
  return got;
}

// Where the first frame header announcing more than kMaxPayload ends in
// `stream`, or SIZE_MAX.
size_t oversized_header_end(const std::vector<uint8_t>& stream) {
  BaspFrameMeter meter(kMaxPayload);
  for (size_t i = 0; i < stream.size(); ++i) {
    if (!meter.feed(&stream[i], 1)) return i + 1;
  }
  return SIZE_MAX;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  World& w = world();
  const bool authenticate = data[0] & 1;
  const std::vector<uint8_t> rest(data + 1, data + size);
  std::string error;
  int fd = open_socket("127.0.0.1", w.gate->port(), false, error);
  if (fd < 0) std::abort();
  if (!wait_for(fd, POLLOUT)) std::abort();  // the gate does not accept
  make_blocking(fd);
  const int accepted_before = w.sink.accepted.load();
  std::vector<uint8_t> reply_prefix;
  if (authenticate) {
    const std::vector<uint8_t> nonce(nonce_bytes, 0x5a);
    std::vector<uint8_t> hello{'A', 'L', 'M', 'G', 'A', 'T', 'E', '1'};
    hello.insert(hello.end(), nonce.begin(), nonce.end());
    if (!send_all(fd, hello.data(), hello.size())) std::abort();
    std::vector<uint8_t> theirs = read_from(fd, hello.size());
    if (theirs.size() != hello.size()) std::abort();
    theirs.erase(theirs.begin(), theirs.begin() + 8);
    const auto proof = gate_proof(kSecret, GateSide::dialer, nonce, theirs);
    if (!send_all(fd, proof.data(), proof.size())) std::abort();
    reply_prefix = read_from(fd, 1 + proof_bytes);
    if (reply_prefix.size() != 1 + proof_bytes || reply_prefix[0] != 0) std::abort();
  }
  send_all(fd, rest.data(), rest.size());
  ::shutdown(fd, SHUT_WR);
  (void)read_from(fd, 0);  // the sink sends nothing, so only the close comes back
  ::close(fd);
  if (!authenticate) {
    // Only the secret opens the way to the middleman.
    if (w.sink.accepted.load() != accepted_before) std::abort();
    return 0;
  }
  const std::vector<uint8_t> relayed = w.sink.next();
  if (relayed.size() > rest.size() || !std::equal(relayed.begin(), relayed.end(), rest.begin())) std::abort();
  if (relayed.size() >= oversized_header_end(rest)) std::abort();
  return 0;
}
