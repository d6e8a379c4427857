#include "cluster/transfer/kv_data_plane.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <algorithm>
#include <atomic>
#include <map>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "actors/wire.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "cluster/transport/little_endian.hpp"
#include "cluster/transport/ucx_link.hpp"

namespace actorlm {
namespace {

constexpr char kMagic[] = "actorlm-kv3";  // 11 bytes on the wire, no terminator
constexpr size_t kMagicBytes = sizeof(kMagic) - 1;
constexpr size_t kNonce = nonce_bytes;
constexpr size_t kHello = kMagicBytes + 1 + 8 + kNonce;
constexpr size_t kChunkHeader = 8 + 5 * 4;
// A frame with this header and no payload: the sender is alive and waits
// for rows still being computed (a streamed prompt), so a receiver's
// timeout for a silent peer does not end a transfer behind a long prefill.
constexpr char kKeepalive[] = "wait";
constexpr size_t kKeepaliveHeader = sizeof(kKeepalive) - 1;
constexpr uint64_t kMaxChunk = 256ull << 20;
constexpr size_t kMaxAckError = 1000;
// A peer that has not proven a session yet: how many at once, and how long
// each may take (as the node's gate allows strangers).
constexpr size_t kMaxConnections = 64;
constexpr std::chrono::milliseconds kHandshakeTimeout{5000};
// The link frame's header: "link" and the transport; its payload a UCX
// worker address (a few hundred bytes) or nothing.
constexpr char kLinkMagic[] = "link";
constexpr size_t kLinkHeader = 5;
constexpr uint64_t kMaxLinkAddress = 64u << 10;

// Reads and writes that wait longer than `timeout` fail (a silent peer).
void set_timeouts(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::vector<uint8_t> proof(const std::vector<uint8_t>& key, const std::vector<uint8_t>& dialer_nonce,
                           const std::vector<uint8_t>& acceptor_nonce) {
  return labelled_mac(std::string(key.begin(), key.end()), "actorlm-data-proof", {&dialer_nonce, &acceptor_nonce});
}

std::vector<uint8_t> chunk_header(uint64_t ticket, int32_t tokens, const KvChunkRange& r) {
  std::vector<uint8_t> h(kChunkHeader);
  put_le<uint64_t>(h.data(), ticket);
  put_le<int32_t>(h.data() + 8, tokens);
  put_le<int32_t>(h.data() + 12, r.first_layer);
  put_le<int32_t>(h.data() + 16, r.last_layer);
  put_le<int32_t>(h.data() + 20, r.first_token);
  put_le<int32_t>(h.data() + 24, r.last_token);
  return h;
}

// An acknowledgement: the ticket, then empty (written) or why not.
std::vector<uint8_t> ack(uint64_t ticket, const std::string& error) {
  const size_t n = std::min(error.size(), kMaxAckError);
  std::vector<uint8_t> h(8 + n);
  put_le<uint64_t>(h.data(), ticket);
  if (n) std::memcpy(h.data() + 8, error.data(), n);
  return h;
}

std::vector<uint8_t> link_header(DataTransport t) {
  std::vector<uint8_t> h(kLinkHeader);
  std::memcpy(h.data(), kLinkMagic, 4);
  h[4] = static_cast<uint8_t>(t);
  return h;
}

// Reads a link frame: its transport and address.
DataTransport read_link(DataReceiver& in, std::vector<uint8_t>& address) {
  std::vector<uint8_t> header;
  uint64_t bytes = 0;
  if (!in.next(header, bytes)) throw DataChannelError("the peer closed the data plane connection before naming its link");
  if (header.size() != kLinkHeader || std::memcmp(header.data(), kLinkMagic, 4) != 0 || header[4] > 1) {
    throw DataChannelError("a data plane peer that did not name its link");
  }
  if (bytes > kMaxLinkAddress) throw DataChannelError("a UCX address over 64 KiB");
  address.resize(bytes);
  const std::span<uint8_t> into[] = {{address.data(), address.size()}};
  in.read_payload(into);
  return static_cast<DataTransport>(header[4]);
}

void send_link(DataSender& out, DataTransport t, const std::vector<uint8_t>& address) {
  const std::span<const uint8_t> pieces[] = {{address.data(), address.size()}};
  out.send(link_header(t), pieces);
}

int dial(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    throw DataChannelError("cannot resolve the decode node's data plane host " + host);
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    set_timeouts(fd, timeout);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) throw DataChannelError("cannot connect to the decode node's data plane at " + host + ":" + std::to_string(port));
  return fd;
}

// The test knob KvDataSend::pause_per_chunk: the first pause of a transfer
// is logged (a test waits for that line before it kills a node), and a
// cancelled transfer stops waiting at once.
void pause(const KvDataSend& send, const KvDataTarget& target, size_t chunk) {
  if (chunk == 0) {
    std::fprintf(stderr, "actorlm kv sender: (test) transfer to %s:%u pauses %lld ms after each chunk\n",
                 target.host.c_str(), unsigned{target.port}, static_cast<long long>(send.pause_per_chunk.count()));
  }
  const auto until = std::chrono::steady_clock::now() + send.pause_per_chunk;
  while (std::chrono::steady_clock::now() < until) {
    if (send.cancel && send.cancel->cancelled()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

void KvDataCancel::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool KvDataCancel::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void KvDataCancel::attach(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  fd_ = fd;
  if (cancelled_ && fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void KvDataFeed::add(std::span<const int32_t> rows, std::span<const KvChunkRange> chunks,
                     std::span<const uint64_t> steps, bool last) {
  if (steps.size() != chunks.size()) throw std::invalid_argument("KvDataFeed::add: one step per chunk");
  {
    std::lock_guard lock(mu_);
    rows_.insert(rows_.end(), rows.begin(), rows.end());
    plan_.insert(plan_.end(), chunks.begin(), chunks.end());
    steps_.insert(steps_.end(), steps.begin(), steps.end());
    if (last) open_ = false;
  }
  cv_.notify_all();
}

void KvDataFeed::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

bool KvDataFeed::stopped() const {
  std::lock_guard lock(mu_);
  return stopped_;
}

bool KvDataFeed::next(std::chrono::milliseconds wait, std::vector<int32_t>& rows, std::vector<KvChunkRange>& plan,
                      std::vector<uint64_t>& steps, bool& open) {
  std::unique_lock lock(mu_);
  const size_t have = plan.size();
  const bool ready = cv_.wait_for(lock, wait, [&] { return stopped_ || !open_ || plan_.size() > have; });
  if (!ready || stopped_) return false;
  rows.insert(rows.end(), rows_.begin() + static_cast<ptrdiff_t>(rows.size()), rows_.end());
  plan.insert(plan.end(), plan_.begin() + static_cast<ptrdiff_t>(have), plan_.end());
  steps.insert(steps.end(), steps_.begin() + static_cast<ptrdiff_t>(have), steps_.end());
  open = open_;
  return true;
}

uint64_t DataSessions::id_of(const std::vector<uint8_t>& key) {
  const std::vector<uint8_t> mac = labelled_mac(std::string(key.begin(), key.end()), "actorlm-data-session", {});
  return get_le<uint64_t>(mac.data());
}

uint64_t DataSessions::add(const std::vector<uint8_t>& key) {
  const uint64_t id = id_of(key);
  std::lock_guard<std::mutex> lock(mu_);
  keys_[id] = key;
  return id;
}

void DataSessions::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  keys_.erase(id);
}

std::optional<std::vector<uint8_t>> DataSessions::key(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(id);
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

KvDataServer::KvDataServer(caf::actor_system& system, KvDataServerConfig config)
    : system_(system), cfg_(std::move(config)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string where = cfg_.host + ":" + std::to_string(cfg_.port);
  if (::getaddrinfo(cfg_.host.c_str(), std::to_string(cfg_.port).c_str(), &hints, &found) != 0 || !found) {
    throw std::runtime_error("cannot resolve the KV data plane address " + where);
  }
  for (addrinfo* a = found; a && listener_ < 0; a = a->ai_next) {
    listener_ = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (listener_ < 0) continue;
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listener_, a->ai_addr, a->ai_addrlen) != 0 || ::listen(listener_, 64) != 0) {
      ::close(listener_);
      listener_ = -1;
    }
  }
  ::freeaddrinfo(found);
  if (listener_ < 0) throw std::runtime_error("cannot listen for the KV data plane on " + where + ": " + std::strerror(errno));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listener_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

KvDataServer::~KvDataServer() {
  stopping_ = true;
  acceptor_.join();
  std::map<int, std::thread> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(connections_);
    for (auto& [fd, t] : left) ::shutdown(fd, SHUT_RDWR);  // wakes a blocked read or write
  }
  for (auto& [fd, t] : left) {
    t.join();
    ::close(fd);
  }
  ::close(listener_);
}

void KvDataServer::accept_loop() {
  while (!stopping_) {
    pollfd p{listener_, POLLIN, 0};
    const int ready = ::poll(&p, 1, 200);
    {
      // Threads that ended: joined and their sockets closed here, so that a
      // stream of short connections does not pile up threads.
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : finished_) {
        auto it = connections_.find(fd);
        if (it == connections_.end()) continue;
        it->second.join();
        ::close(fd);
        connections_.erase(it);
      }
      finished_.clear();
    }
    if (ready <= 0) continue;
    const int fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0) continue;
    set_timeouts(fd, std::min(kHandshakeTimeout, cfg_.timeout));
    std::lock_guard<std::mutex> lock(mu_);
    if (connections_.size() >= kMaxConnections) {
      ::close(fd);  // full: a flood of connections costs no thread
      continue;
    }
    ++accepted_;
    connections_.emplace(fd, std::thread([this, fd] {
      serve(fd);
      std::lock_guard<std::mutex> lock(mu_);
      finished_.push_back(fd);
    }));
  }
}

void KvDataServer::serve(int fd) {
  uint64_t request = 0;  // the local request of the chunk in hand: failed if the connection breaks
  int64_t served = 0;    // chunks written over this connection
  // Not anonymous: the gateway takes this only from an actor of its process.
  caf::scoped_actor self{system_};
  auto fail = [&](uint64_t id, const std::string& why) {
    std::fprintf(stderr, "actorlm kv data plane: %s: %s\n", id ? "refused a KV chunk" : "closed a connection", why.c_str());
    if (id) self->send(cfg_.gateway, kv_data_failed_atom::value, id, why);
  };
  try {
    uint8_t hello[kHello];
    recv_all(fd, hello, kHello, "data plane handshake");
    if (std::memcmp(hello, kMagic, kMagicBytes) != 0) throw DataChannelError("not a KV data plane connection");
    const auto protection = static_cast<DataProtection>(hello[kMagicBytes]);
    const std::vector<uint8_t> dialer_nonce(hello + kMagicBytes + 9, hello + kHello);
    const std::vector<uint8_t> acceptor_nonce = make_nonce();
    send_all(fd, acceptor_nonce.data(), acceptor_nonce.size(), "data plane handshake");
    std::vector<uint8_t> their_proof(32);
    recv_all(fd, their_proof.data(), their_proof.size(), "data plane handshake");
    // Checked after the proof arrived, whatever failed, so that a stranger
    // learns nothing from when the connection closes.
    const uint64_t session = get_le<uint64_t>(hello + kMagicBytes + 1);
    const auto key = cfg_.sessions->key(session);
    if (!key || !macs_equal(their_proof, proof(*key, dialer_nonce, acceptor_nonce))) {
      throw DataChannelError("a data plane peer without a joined session");
    }
    if (protection != cfg_.protection) {
      throw DataChannelError(protection == DataProtection::trusted_fabric
                                 ? "a peer asked for the trusted-fabric data plane; this node seals it"
                                 : "a peer seals the data plane; this node runs it as a trusted fabric");
    }
    set_timeouts(fd, cfg_.timeout);  // proven: as long as a transfer may pause
    const DataKeys keys = derive_data_keys(*key, dialer_nonce, acceptor_nonce);
    SocketLink socket(fd);
    DataReceiver in(socket, protection, keys.dialer_to_acceptor, kMaxChunk);
    DataSender out(socket, protection, keys.acceptor_to_dialer);
    // The link for the chunks: UCX when both ends want it and it reaches
    // the dialer, else this socket.
    std::vector<uint8_t> address;
    std::unique_ptr<UcxLink> ucx;
    if (read_link(in, address) == DataTransport::ucx && cfg_.transport == DataTransport::ucx) {
      try {
        ucx = std::make_unique<UcxLink>(fd, cfg_.timeout);
        ucx->connect(address);
        address = ucx->address();
      } catch (const DataChannelError& e) {
        std::fprintf(stderr, "actorlm kv data plane: staying on TCP: %s\n", e.what());
        ucx.reset();
      }
    }
    if (!ucx) address.clear();
    send_link(out, ucx ? DataTransport::ucx : DataTransport::socket, address);
    if (ucx) {
      in.use(*ucx);
      out.use(*ucx);
    }
    std::vector<uint8_t> header;
    std::vector<std::span<uint8_t>> in_place;
    uint64_t bytes = 0;
    // Between transfers (every chunk of the last one in) a kept connection
    // is silent for as long as its sender keeps it; inside one, a silence
    // past the timeout is a peer gone.
    uint64_t last_ticket = 0;
    bool between = false;
    auto wait_between = [&](bool b) {
      if (b == between) return;
      between = b;
      const auto t = b ? std::max(cfg_.kept_idle, cfg_.timeout) : cfg_.timeout;
      set_timeouts(fd, t);
      if (ucx) ucx->set_timeout(t);
    };
    for (;;) {
      wait_between(served > 0 && !cfg_.receiver->expects_more(last_ticket));
      if (stopping_ || !in.next(header, bytes)) break;
      wait_between(false);
      if (header.size() == kKeepaliveHeader && bytes == 0 && std::memcmp(header.data(), kKeepalive, kKeepaliveHeader) == 0) {
        in.skip_payload();
        continue;
      }
      if (header.size() != kChunkHeader) throw DataChannelError("a malformed KV chunk header");
      // A connection lives on between transfers (KvDataLinks): it carries
      // chunks only while the join it proved is still held.
      if (!cfg_.sessions->key(session)) return fail(0, "the joined session this connection proved has ended");
      const uint64_t ticket = get_le<uint64_t>(header.data());
      const KvChunkRange range{get_le<int32_t>(header.data() + 12), get_le<int32_t>(header.data() + 16), get_le<int32_t>(header.data() + 20),
                               get_le<int32_t>(header.data() + 24)};
      KvReceiver::Taken taken = cfg_.receiver->admit(ticket, get_le<int32_t>(header.data() + 8), range, bytes);
      if (!taken.write) {
        fail(taken.request_id, taken.error);
        in.skip_payload();
        out.send(ack(ticket, taken.error), {});
        return;
      }
      request = taken.request_id;
      last_ticket = ticket;
      // Admitted: the receiver's fence holds this request's abort until the
      // write is done in place or queued at the worker, or abandoned when the
      // payload never comes (KvReceiver::landed).
      struct Landing {
        KvReceiver& receiver;
        caf::scoped_actor& self;
        const caf::actor& gateway;
        uint64_t ticket, request;
        ~Landing() {
          if (receiver.landed(ticket)) self->send(gateway, kv_landed_atom::value, request);
        }
      };
      std::string error;
      {
        Landing landing{*cfg_.receiver, self, cfg_.gateway, ticket, request};
        if (cfg_.spans) {
          // Straight into the reserved rows. A payload that fails its tag
          // leaves garbage there, in rows no request reads before this
          // transfer commits, which it then never does.
          if (!cfg_.spans(taken.write->rows, range.first_layer, range.last_layer, in_place)) {
            throw DataChannelError("writing KV: no pool in place");
          }
          uint64_t room = 0;
          for (auto s : in_place) room += s.size();
          if (room != bytes) throw DataChannelError("writing KV: the rows hold " + std::to_string(room) + " bytes, not " + std::to_string(bytes));
          in.read_payload(in_place);
        } else {
          std::vector<uint8_t> data(bytes);
          const std::span<uint8_t> into[] = {{data.data(), data.size()}};
          in.read_payload(into);
          self->request(cfg_.worker, cfg_.timeout, kv_write_raw_atom::value, std::move(taken.write->rows), range.first_layer,
                        range.last_layer, std::move(data))
              .receive([&](const std::string& e) { error = e; },
                       [&](const caf::error& e) { error = "writing KV: " + system_.render(e); });
        }
      }
      if (!error.empty()) {
        fail(request, error);
        out.send(ack(ticket, error), {});
        return;
      }
      ++chunks_;
      ++served;
      request = 0;
      out.send(ack(ticket, ""), {});
    }
  } catch (const std::exception& e) {
    // A frame that fails its tag, a cut connection, a stranger: the chunk in
    // hand (if any) is lost, and so is its request's transfer. A connection
    // kept open by its sender after its transfers, and silent past the
    // timeout, ends quietly: nothing was in hand.
    if (request != 0 || served == 0) fail(request, e.what());
  }
}

struct KvDataLinks::Connection {
  int fd;
  SocketLink socket;
  DataSender out;
  DataReceiver acks;
  std::unique_ptr<UcxLink> ucx;  // closed before the socket it watches
  DataTransport transport = DataTransport::socket;
  Connection(int fd, DataProtection protection, const DataKeys& keys)
      : fd(fd),
        socket(fd),
        out(socket, protection, keys.dialer_to_acceptor),
        acks(socket, protection, keys.acceptor_to_dialer, kMaxLinkAddress) {}
  ~Connection() {
    ucx.reset();
    ::close(fd);
  }
  // Open and quiet: between transfers the data port sends nothing, so a
  // readable socket is one the port closed (or broke).
  bool idle_and_open() const {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }
};

struct KvDataLinks::Impl {
  struct Idle {
    std::chrono::steady_clock::time_point since;
    std::unique_ptr<Connection> connection;
  };
  std::chrono::milliseconds idle;
  size_t per_target;
  std::mutex mu;
  std::multimap<std::string, Idle> waiting;
  std::atomic<int64_t> dialled{0}, reused{0};
};

KvDataLinks::KvDataLinks(std::chrono::milliseconds idle, size_t per_target) : impl_(std::make_unique<Impl>()) {
  impl_->idle = idle;
  impl_->per_target = per_target;
}

KvDataLinks::~KvDataLinks() = default;

std::unique_ptr<KvDataLinks::Connection> KvDataLinks::take(const std::string& target) {
  std::vector<std::unique_ptr<Connection>> stale;  // closed outside the lock
  std::unique_ptr<Connection> found;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = impl_->waiting.begin(); it != impl_->waiting.end();) {
      const bool mine = it->first == target && !found;
      if (now - it->second.since > impl_->idle || (mine && !it->second.connection->idle_and_open())) {
        stale.push_back(std::move(it->second.connection));
      } else if (mine) {
        found = std::move(it->second.connection);
      } else {
        ++it;
        continue;
      }
      it = impl_->waiting.erase(it);
    }
  }
  if (found) ++impl_->reused;
  return found;
}

void KvDataLinks::give_back(const std::string& target, std::unique_ptr<Connection> connection) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->waiting.count(target) >= impl_->per_target) return;  // closed as it goes
  impl_->waiting.emplace(target, Impl::Idle{std::chrono::steady_clock::now(), std::move(connection)});
}

int64_t KvDataLinks::dialled() const { return impl_->dialled; }
int64_t KvDataLinks::reused() const { return impl_->reused; }
void KvDataLinks::count_dial() { ++impl_->dialled; }

namespace {

// Lets a transfer's cancel go of the connection's socket when it leaves
// scope; declared after the connection, so before the socket closes (a
// cancel holding a closed socket's number could shut down another socket).
struct CancelRelease {
  KvDataCancel* cancel;
  ~CancelRelease() {
    if (cancel) cancel->attach(-1);
  }
};

// What a connection is kept for: one decode node's data port under one
// joined session, protection and link.
std::string link_key(const KvDataTarget& target) {
  return target.host + "|" + std::to_string(target.port) + "|" + std::to_string(DataSessions::id_of(target.session_key)) +
         "|" + std::to_string(static_cast<int>(target.protection)) + "|" + std::to_string(static_cast<int>(target.transport));
}

// Dials the decode node's data port, proves the session and agrees on the
// link. `cancel` (optional) can shut the socket down meanwhile.
std::unique_ptr<KvDataLinks::Connection> dial_connection(const KvDataTarget& target, std::chrono::milliseconds timeout,
                                                         KvDataCancel* cancel) {
  struct Dialled {
    int fd;
    KvDataCancel* cancel;
    ~Dialled() {
      if (fd < 0) return;
      if (cancel) cancel->attach(-1);  // before the number can name another socket
      ::close(fd);
    }
  } d{dial(target.host, target.port, timeout), cancel};
  if (cancel) cancel->attach(d.fd);
  uint8_t hello[kHello];
  std::memcpy(hello, kMagic, kMagicBytes);
  hello[kMagicBytes] = static_cast<uint8_t>(target.protection);
  put_le<uint64_t>(hello + kMagicBytes + 1, DataSessions::id_of(target.session_key));
  const std::vector<uint8_t> dialer_nonce = make_nonce();
  std::memcpy(hello + kMagicBytes + 9, dialer_nonce.data(), kNonce);
  send_all(d.fd, hello, kHello, "data plane handshake");
  std::vector<uint8_t> acceptor_nonce(kNonce);
  recv_all(d.fd, acceptor_nonce.data(), kNonce, "data plane handshake");
  const std::vector<uint8_t> mine = proof(target.session_key, dialer_nonce, acceptor_nonce);
  send_all(d.fd, mine.data(), mine.size(), "data plane handshake");
  auto c = std::make_unique<KvDataLinks::Connection>(d.fd, target.protection,
                                                     derive_data_keys(target.session_key, dialer_nonce, acceptor_nonce));
  d.fd = -1;  // the connection's now
  // Should the rest throw, the cancel lets go of the socket before the
  // connection closes it (declared after it, so destroyed first).
  CancelRelease detach{cancel};
  std::vector<uint8_t> address;
  if (target.transport == DataTransport::ucx) {
    if (const std::string why = ucx_unavailable(); !why.empty()) {
      std::fprintf(stderr, "actorlm kv sender: staying on TCP: %s\n", why.c_str());
    } else {
      // This end sends the chunks: it offers the decode node its ring.
      c->ucx = std::make_unique<UcxLink>(c->fd, timeout, /*offer_ring=*/true);
      address = c->ucx->address();
    }
  }
  send_link(c->out, c->ucx ? DataTransport::ucx : DataTransport::socket, address);
  if (read_link(c->acks, address) == DataTransport::ucx) {
    if (!c->ucx) throw DataChannelError("the decode node answered with a link this node did not ask for");
    c->ucx->connect(address);
    c->out.use(*c->ucx);
    c->acks.use(*c->ucx);
    c->transport = DataTransport::ucx;
  } else {
    c->ucx.reset();
  }
  detach.cancel = nullptr;  // still attached: the caller detaches it
  return c;
}

}  // namespace

KvDataResult send_kv_over_data_plane(caf::actor_system& system, const KvDataTarget& target, const KvDataSend& send) {
  KvDataResult result;
  // A fed chunk's step comes with it from the feed, never from `plan`.
  if (send.feed && (!send.rows.empty() || !send.plan.empty())) {
    result.error = "a fed transfer with rows of its own";
    return result;
  }
  // What the feed has handed over so far: kept if the transfer starts again
  // on a new connection.
  std::vector<int32_t> rows_now = send.rows;
  std::vector<KvChunkRange> plan = send.plan;
  std::vector<uint64_t> steps(plan.size(), 0);  // a fed chunk's step (KvDataFeed)
  bool open = send.feed != nullptr;            // more rows may come
  const auto tokens = send.feed ? send.tokens : static_cast<int32_t>(send.rows.size());
  const std::string key = link_key(target);
  caf::scoped_actor self{system};
  std::vector<std::span<uint8_t>> in_place;
  std::vector<std::span<const uint8_t>> pieces;
  std::vector<uint8_t> data;
  for (bool first_try = true;; first_try = false) {
    std::unique_ptr<KvDataLinks::Connection> c;
    // Detached before the connection closes (declared after it).
    CancelRelease detach{send.cancel.get()};
    bool answered = false;  // a frame came back over this connection
    result = KvDataResult{};
    try {
      if (send.links && first_try) c = send.links->take(key);
      result.reused = c != nullptr;
      if (c) {
        if (send.cancel) send.cancel->attach(c->fd);
      } else {
        if (send.links) send.links->count_dial();
        c = dial_connection(target, send.timeout, send.cancel.get());
      }
      result.transport = c->transport;
      result.ring = c->ucx && c->ucx->sends_through_ring();
      size_t acked = 0;
      auto take_ack = [&] {
        std::vector<uint8_t> header;
        uint64_t bytes = 0;
        if (!c->acks.next(header, bytes)) throw DataChannelError("the decode node closed the data plane connection");
        answered = true;
        c->acks.skip_payload();
        if (header.size() < 8 || get_le<uint64_t>(header.data()) != send.ticket) throw DataChannelError("a foreign acknowledgement");
        if (header.size() > 8) throw DataChannelError("the decode node refused a chunk: " + std::string(header.begin() + 8, header.end()));
        ++acked;
      };
      // While rows are still being computed, a keepalive at this interval:
      // well inside the receiver's timeout for a silent peer.
      const auto keepalive = std::max(std::chrono::milliseconds(10), send.timeout / 4);
      // At most a few chunks unacknowledged, so neither side's socket buffer
      // fills with what the other is not reading.
      constexpr size_t kWindow = 4;
      for (size_t i = 0;; ++i) {
        while (i == plan.size() && open) {
          // Everything computed so far is sent: wait for more. (Acknowledgements
          // wait in the socket meanwhile: at most kWindow of them.)
          if (send.feed->next(keepalive, rows_now, plan, steps, open)) continue;
          if (send.feed->stopped() || (send.cancel && send.cancel->cancelled())) throw DataChannelError("cancelled");
          c->out.send({reinterpret_cast<const uint8_t*>(kKeepalive), kKeepaliveHeader}, {});
        }
        if (i == plan.size()) break;
        if (send.cancel && send.cancel->cancelled()) throw DataChannelError("cancelled");
        const KvChunkRange& r = plan[i];
        if (r.last_token > static_cast<int32_t>(rows_now.size())) throw DataChannelError("a chunk past the rows computed");
        // Layer by layer: the chunk's rows are being written by step
        // steps[i]; it goes once that step has stored its last layer.
        if (steps[i] != 0) {
          if (!send.clock) throw DataChannelError("a chunk of a step in progress, and no clock to wait on");
          while (!send.clock->wait(steps[i], r.last_layer, keepalive)) {
            if (send.feed->stopped() || (send.cancel && send.cancel->cancelled())) throw DataChannelError("cancelled");
            c->out.send({reinterpret_cast<const uint8_t*>(kKeepalive), kKeepaliveHeader}, {});
          }
        }
        const std::span<const int32_t> rows = std::span(rows_now).subspan(static_cast<size_t>(r.first_token),
                                                                          static_cast<size_t>(r.last_token - r.first_token));
        pieces.clear();
        if (send.spans) {
          if (!send.spans(rows, r.first_layer, r.last_layer, in_place)) throw DataChannelError("reading KV: no pool in place");
          pieces.assign(in_place.begin(), in_place.end());
        } else {
          std::string error;
          self->request(send.worker, send.timeout, kv_read_raw_atom::value, std::vector<int32_t>(rows.begin(), rows.end()),
                        r.first_layer, r.last_layer)
              .receive([&](std::vector<uint8_t>& d) { data = std::move(d); },
                       [&](const caf::error& e) { error = "reading KV: " + system.render(e); });
          if (!error.empty()) throw DataChannelError(error);
          pieces.emplace_back(data.data(), data.size());
        }
        const int64_t nth = send.sent ? send.sent->fetch_add(1) : static_cast<int64_t>(i);
        if (nth == send.corrupt_chunk) c->out.damage_next_payload();
        c->out.send(chunk_header(send.ticket, tokens, r), pieces);
        ++result.chunks;
        if (open) ++result.early_chunks;
        for (auto p : pieces) result.bytes += static_cast<int64_t>(p.size());
        if (i + 1 - acked > kWindow) take_ack();
        if (send.pause_per_chunk.count() > 0) pause(send, target, i);
      }
      while (acked < plan.size()) take_ack();
      if (send.links) {
        if (send.cancel) send.cancel->attach(-1);
        detach.cancel = nullptr;
        send.links->give_back(key, std::move(c));
      }
      return result;
    } catch (const std::exception& e) {
      // A connection kept from an earlier transfer that broke before the
      // decode node answered anything over it (it closed the connection as
      // this transfer began): once more on a new one. Any answer, a refusal
      // included, means the port was there, and the transfer fails.
      const bool stopped = (send.cancel && send.cancel->cancelled()) || (send.feed && send.feed->stopped());
      if (result.reused && !answered && !stopped) {
        std::fprintf(stderr, "actorlm kv sender: a kept data plane connection to %s:%u failed (%s); dialling a new one\n",
                     target.host.c_str(), static_cast<unsigned>(target.port), e.what());
        continue;
      }
      result.error = e.what();
      // A refused handshake shows here only as a closed connection.
      if (result.error.find("closed") != std::string::npos || result.error.find("reset") != std::string::npos) {
        result.error += " (if the decode node refused the connection, its log says why: a different "
                        "--kv-trusted-fabric setting, or a session it does not hold)";
      }
      return result;
    }
  }
}

}  // namespace actorlm
