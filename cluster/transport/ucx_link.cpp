#include "cluster/transport/ucx_link.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef ACTORLM_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

#include "cluster/transport/little_endian.hpp"

namespace actorlm {

#ifdef ACTORLM_HAVE_UCX
namespace {

// Every message of a link has this tag: the worker is the link's alone.
constexpr ucp_tag_t kTag = 0xac70'd47aull;
// Credits: the receiver's word that it has read a ring block (one byte each).
constexpr ucp_tag_t kCreditTag = 0xac70'd47bull;
// The ring a sending end offers: blocks of the data plane's payload size.
constexpr uint32_t kRingBlocks = 4;
constexpr size_t kRingBlock = 1u << 20;
// A block filled in the ring: its magic, its index and its length, sent in
// the place of the block itself.
constexpr uint32_t kNoteMagic = 0x52'49'4e'47;  // "RING"
constexpr size_t kNote = 16;
// An address: version, flags, the worker's address and the ring's key.
constexpr uint8_t kAddressVersion = 1;
constexpr uint8_t kOffersRing = 1, kReadsPeerRing = 2;
constexpr size_t kMaxAddressPart = 32u << 10;

// The longest message a peer may send: a payload block of data_channel.cpp
// (1 MiB) or a header with its prefix and tag; anything longer is refused
// before it is received.
constexpr size_t kMaxMessage = (1u << 20) + 8192;

// One UCX context for the process, made on first use and kept until exit.
struct Context {
  ucp_context_h handle = nullptr;
  std::string error;
  Context() {
    ucp_config_t* config = nullptr;
    if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) {
      error = "cannot read UCX's configuration";
      return;
    }
    // See ucx_link.hpp: no TCP transport unless the operator asks for one.
    if (!std::getenv("UCX_TLS")) ucp_config_modify(config, "TLS", "^tcp");
    // A ring's memory (the only memory UCX allocates here) from its POSIX
    // shared memory, whose files are the user's alone (0600, reached by a
    // peer through /proc/PID/fd); by default UCX takes a System V segment
    // first, which its group may attach.
    if (!std::getenv("UCX_ALLOC_PRIO")) ucp_config_modify(config, "ALLOC_PRIO", "md:posix,thp,mmap,heap");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    // RMA: a ring's memory key (ucp_rkey_pack) needs it; nothing is put or got.
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA;
    params.mt_workers_shared = 1;  // links on many threads at once
    const ucs_status_t s = ucp_init(&params, config, &handle);
    ucp_config_release(config);
    if (s != UCS_OK) {
      handle = nullptr;
      error = std::string("UCX did not start: ") + ucs_status_string(s);
    }
  }
  ~Context() {
    if (handle) ucp_cleanup(handle);
  }
};

Context& context() {
  static Context c;
  return c;
}

void fail(const char* what, const std::string& why) { throw DataChannelError(std::string(what) + ": " + why); }

// Bounds-checked reading of a peer's address.
struct Reader {
  std::span<const uint8_t> in;
  size_t at = 0;
  const uint8_t* take(size_t n) {
    if (n > in.size() - at) throw DataChannelError("a malformed UCX link address");
    const uint8_t* p = in.data() + at;
    at += n;
    return p;
  }
  template <class T>
  T get() {
    return get_le<T>(take(sizeof(T)));
  }
  std::span<const uint8_t> part() {
    const auto n = get<uint32_t>();
    if (n > kMaxAddressPart) throw DataChannelError("a malformed UCX link address");
    return {take(n), n};
  }
};

// Whether [p, p + n) lies inside one mapping of this process (one line of
// /proc/self/maps): a shorter mapping may have another right after it.
bool one_mapping_holds(const void* p, size_t n) {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool holds = false;
  char line[4200];  // a path is at most PATH_MAX (4096)
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    if (at >= lo && at < hi) {
      holds = n <= hi - at;
      break;
    }
  }
  std::fclose(maps);
  return holds;
}

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  out.resize(out.size() + sizeof(T));
  put_le(out.data() + out.size() - sizeof(T), v);
}

}  // namespace

std::string ucx_unavailable() { return context().error; }

struct UcxLink::Impl {
  int control;
  std::chrono::milliseconds timeout;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  int efd = -1;
  bool broken = false;  // a request failed: close without waiting long
  std::vector<uint8_t> held;  // a message longer than the read that took it
  size_t held_at = 0;
  // This end's ring, when it offers one, and whether the peer reads it.
  ucp_mem_h ring_mem = nullptr;
  uint8_t* ring = nullptr;
  bool peer_reads_ring = false;
  uint32_t credits = kRingBlocks;  // ring blocks free to fill
  uint32_t fill_at = 0;            // the next block to fill
  // The peer's ring, mapped here.
  ucp_rkey_h peer_rkey = nullptr;
  const uint8_t* peer_ring = nullptr;
  uint32_t read_at = 0;  // the next block expected from it
  uint64_t read_in_place = 0;

  // True once the control socket shows the peer gone (or this end shut it).
  bool control_closed() const {
    pollfd p{control, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    uint8_t b;
    const ssize_t r = ::recv(control, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    // Data on it is no less a broken link: nothing is sent there any more.
    return r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // Progresses the worker until `done()`, sleeping on its event descriptor
  // and the control socket in between. False when the control socket closed
  // first; throws when UCX fails or the wait runs past the timeout.
  template <class Done>
  bool wait(Done done, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (done()) return true;
      if (ucp_worker_progress(worker) != 0) continue;
      const ucs_status_t armed = ucp_worker_arm(worker);
      if (armed == UCS_ERR_BUSY) continue;
      if (armed != UCS_OK) fail(what, std::string("UCX: ") + ucs_status_string(armed));
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) fail(what, "the peer fell silent (timed out)");
      pollfd fds[2] = {{efd, POLLIN, 0}, {control, POLLIN, 0}};
      const int ready = ::poll(fds, 2, static_cast<int>(left.count()));
      if (ready < 0 && errno != EINTR) fail(what, std::string("poll failed: ") + std::strerror(errno));
      if (ready > 0 && fds[1].revents != 0 && control_closed()) {
        // What was sent before the hang-up may still be in the worker.
        while (ucp_worker_progress(worker) != 0) {
        }
        return done();
      }
    }
  }

  // Waits for request `r` (of ucp_*_nbx) to complete. On a failure the
  // request is cancelled and left to UCX; it can touch the caller's buffer
  // only while this link's worker is progressed, which after a throw it is
  // no more, and the worker is destroyed before any buffer it was given (the
  // link is declared after them).
  void finish(ucs_status_ptr_t r, const char* what) {
    if (r == nullptr) return;
    if (UCS_PTR_IS_ERR(r)) fail(what, std::string("UCX: ") + ucs_status_string(UCS_PTR_STATUS(r)));
    std::string error;
    try {
      if (!wait([&] { return ucp_request_check_status(r) != UCS_INPROGRESS; }, what)) {
        error = std::string(what) + ": the peer closed the connection";
      }
    } catch (const DataChannelError& e) {
      error = e.what();
    }
    const ucs_status_t s = error.empty() ? ucp_request_check_status(r) : UCS_INPROGRESS;
    if (s == UCS_INPROGRESS) ucp_request_cancel(worker, r);
    ucp_request_free(r);
    if (error.empty() && s != UCS_OK) error = std::string(what) + ": UCX: " + ucs_status_string(s);
    if (!error.empty()) {
      broken = true;
      throw DataChannelError(error);
    }
  }

  // Closes the endpoint after what was sent reached the peer, waiting not
  // long: a peer that is gone cannot answer, and a broken link has nothing
  // worth delivering. (No forced close: UCX allows it only with peer
  // failure handling, which its shared-memory transports lack.)
  void close_endpoint() {
    if (!ep) return;
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    ep = nullptr;
    if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
    // A peer whose control socket closed is gone too (a kept connection
    // its data port closed while it was idle).
    const bool gone = broken || control_closed();
    const auto until = std::chrono::steady_clock::now() + (gone ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2000));
    while (ucp_request_check_status(r) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until) {
      ucp_worker_progress(worker);
    }
    ucp_request_free(r);
  }

  // Takes every credit the peer has sent; with `wait_for_one`, waits until
  // there is at least one.
  void take_credits(bool wait_for_one, const char* what) {
    for (;;) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h m = nullptr;
      auto arrived = [&] { return (m = ucp_tag_probe_nb(worker, kCreditTag, ~ucp_tag_t{0}, 1, &info)) != nullptr; };
      if (wait_for_one && credits == 0) {
        if (!wait(arrived, what)) fail(what, "the peer closed the connection");
      } else if (!arrived()) {
        return;
      }
      if (info.length != 1) fail(what, "a malformed ring credit");
      uint8_t byte = 0;
      receive(m, &byte, 1, what);
      if (credits == kRingBlocks) fail(what, "a ring credit for no block");
      ++credits;
    }
  }

  void send_message(const uint8_t* p, size_t n, ucp_tag_t tag, const char* what) {
    if (!ep) fail(what, "UCX link not connected");
    ucp_request_param_t prm{};
    finish(ucp_tag_send_nbx(ep, p, n, tag, &prm), what);
  }

  // The next message, removed from the worker's queue; nullptr when the
  // control socket closed first.
  ucp_tag_message_h next_message(ucp_tag_recv_info_t& info, const char* what) {
    ucp_tag_message_h m = nullptr;
    wait([&] { return (m = ucp_tag_probe_nb(worker, kTag, ~ucp_tag_t{0}, 1, &info)) != nullptr; }, what);
    if (m && info.length > kMaxMessage) fail(what, "a UCX message over the data plane's bound");
    return m;
  }

  void receive(ucp_tag_message_h m, uint8_t* into, size_t n, const char* what) {
    ucp_request_param_t p{};
    finish(ucp_tag_msg_recv_nbx(worker, into, n, m, &p), what);
  }
};

UcxLink::UcxLink(int control, std::chrono::milliseconds timeout, bool offer_ring) : impl_(std::make_unique<Impl>()) {
  Context& c = context();
  if (!c.handle) throw DataChannelError(c.error);
  impl_->control = control;
  impl_->timeout = timeout;
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // one thread drives a link
  ucs_status_t s = ucp_worker_create(c.handle, &wp, &impl_->worker);
  if (s != UCS_OK) throw DataChannelError(std::string("UCX worker: ") + ucs_status_string(s));
  s = ucp_worker_get_efd(impl_->worker, &impl_->efd);
  if (s != UCS_OK) {
    ucp_worker_destroy(impl_->worker);
    throw DataChannelError(std::string("UCX worker wakeup: ") + ucs_status_string(s));
  }
  if (offer_ring) {
    // Memory UCX allocates itself, so that it can be shared (its shared
    // memory transports'). A ring it cannot give is no error: the blocks
    // then travel as messages.
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = kRingBlocks * kRingBlock;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    if (ucp_mem_map(c.handle, &mp, &impl_->ring_mem) == UCS_OK) {
      if (ucp_mem_query(impl_->ring_mem, &attr) == UCS_OK && attr.length >= mp.length) {
        impl_->ring = static_cast<uint8_t*>(attr.address);
      } else {
        ucp_mem_unmap(c.handle, impl_->ring_mem);
        impl_->ring_mem = nullptr;
      }
    }
  }
}

UcxLink::~UcxLink() {
  // Credits for the last blocks read, taken so that UCX does not report
  // them as never received.
  if (impl_->peer_reads_ring) {
    try {
      while (ucp_worker_progress(impl_->worker) != 0) {
      }
      impl_->take_credits(false, "data plane");
    } catch (const DataChannelError&) {
      // A broken link's credits do not matter.
    }
  }
  // The peer's ring key before the endpoint it was unpacked on.
  if (impl_->peer_rkey) ucp_rkey_destroy(impl_->peer_rkey);
  impl_->close_endpoint();
  // A peer still mapping this ring keeps its pages: it never reads freed memory.
  if (impl_->ring_mem) ucp_mem_unmap(context().handle, impl_->ring_mem);
  ucp_worker_destroy(impl_->worker);
}

std::vector<uint8_t> UcxLink::address() const {
  ucp_address_t* a = nullptr;
  size_t n = 0;
  const ucs_status_t s = ucp_worker_get_address(impl_->worker, &a, &n);
  if (s != UCS_OK) throw DataChannelError(std::string("UCX worker address: ") + ucs_status_string(s));
  // A ring whose key cannot be packed is not offered.
  void* key = nullptr;
  size_t key_bytes = 0;
  const bool offer = impl_->ring && ucp_rkey_pack(context().handle, impl_->ring_mem, &key, &key_bytes) == UCS_OK;
  std::vector<uint8_t> out;
  put<uint8_t>(out, kAddressVersion);
  put<uint8_t>(out, static_cast<uint8_t>((offer ? kOffersRing : 0) | (impl_->peer_ring ? kReadsPeerRing : 0)));
  put<uint32_t>(out, static_cast<uint32_t>(n));
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(a), reinterpret_cast<const uint8_t*>(a) + n);
  ucp_worker_release_address(impl_->worker, a);
  if (offer) {
    put<uint64_t>(out, reinterpret_cast<uintptr_t>(impl_->ring));
    put<uint32_t>(out, static_cast<uint32_t>(key_bytes));
    out.insert(out.end(), static_cast<const uint8_t*>(key), static_cast<const uint8_t*>(key) + key_bytes);
    ucp_rkey_buffer_release(key);
  }
  return out;
}

void UcxLink::connect(std::span<const uint8_t> peer_address) {
  Impl& m = *impl_;
  if (m.ep) throw DataChannelError("UCX link already connected");
  Reader r{peer_address};
  if (r.get<uint8_t>() != kAddressVersion) throw DataChannelError("a UCX link address of another version");
  const auto flags = r.get<uint8_t>();
  const std::span<const uint8_t> worker = r.part();
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  // No peer failure handling (UCX's shared-memory transports have none): a
  // peer that dies shows as its TCP connection closing, which every wait
  // here watches.
  p.address = reinterpret_cast<const ucp_address_t*>(worker.data());
  const ucs_status_t s = ucp_ep_create(m.worker, &p, &m.ep);
  if (s != UCS_OK) {
    m.ep = nullptr;
    throw DataChannelError(std::string("UCX cannot reach the peer: ") + ucs_status_string(s));
  }
  // The peer reads this end's ring only if this end offered one.
  m.peer_reads_ring = m.ring && (flags & kReadsPeerRing);
  if (flags & kOffersRing) {
    const auto base = r.get<uint64_t>();
    const std::span<const uint8_t> key = r.part();
    void* local = nullptr;
    // Only where UCX maps the peer's memory here (shared memory on this
    // machine); anywhere else the peer is told to send its blocks.
    if (ucp_ep_rkey_unpack(m.ep, key.data(), &m.peer_rkey) == UCS_OK) {
      // The whole ring must lie in the one mapping UCX made of the peer's
      // memory: a peer whose key covers less must not make a read fault.
      if (ucp_rkey_ptr(m.peer_rkey, base, &local) == UCS_OK && local && one_mapping_holds(local, kRingBlocks * kRingBlock)) {
        m.peer_ring = static_cast<const uint8_t*>(local);
      } else {
        ucp_rkey_destroy(m.peer_rkey);
        m.peer_rkey = nullptr;
      }
    }
  }
  if (r.at != peer_address.size()) throw DataChannelError("a malformed UCX link address");
}

void UcxLink::set_timeout(std::chrono::milliseconds timeout) { impl_->timeout = timeout; }

bool UcxLink::sends_through_ring() const { return impl_->peer_reads_ring; }
uint64_t UcxLink::blocks_read_in_place() const { return impl_->read_in_place; }

void UcxLink::send_all(const uint8_t* p, size_t n, const char* what) {
  if (n == 0) return;
  impl_->send_message(p, n, kTag, what);
}

uint8_t* UcxLink::fill_block(uint8_t* spare, const char* what) {
  Impl& m = *impl_;
  if (!m.peer_reads_ring) return spare;
  m.take_credits(true, what);
  return m.ring + size_t{m.fill_at} * kRingBlock;
}

void UcxLink::send_block(const uint8_t* p, size_t n, const char* what) {
  Impl& m = *impl_;
  if (!m.peer_reads_ring) return send_all(p, n, what);
  if (p != m.ring + size_t{m.fill_at} * kRingBlock || n > kRingBlock || m.credits == 0) {
    fail(what, "a ring block sent that was not the one to fill");
  }
  uint8_t note[kNote];
  std::memcpy(note, &kNoteMagic, 4);
  std::memcpy(note + 4, &m.fill_at, 4);
  const uint64_t bytes = n;
  std::memcpy(note + 8, &bytes, 8);
  m.send_message(note, sizeof note, kTag, what);
  --m.credits;
  m.fill_at = (m.fill_at + 1) % kRingBlocks;
}

const uint8_t* UcxLink::recv_block(uint8_t* spare, size_t n, const char* what) {
  Impl& m = *impl_;
  if (!m.peer_ring) {
    recv_all(spare, n, what);
    return spare;
  }
  uint8_t note[kNote];
  recv_all(note, sizeof note, what);
  uint32_t magic = 0, index = 0;
  uint64_t bytes = 0;
  std::memcpy(&magic, note, 4);
  std::memcpy(&index, note + 4, 4);
  std::memcpy(&bytes, note + 8, 8);
  // The blocks come in ring order, each of the length this frame expects.
  if (magic != kNoteMagic || index != m.read_at || bytes != n || n > kRingBlock) fail(what, "a malformed ring note");
  return m.peer_ring + size_t{index} * kRingBlock;
}

void UcxLink::done_with_block(const char* what) {
  Impl& m = *impl_;
  if (!m.peer_ring) return;
  m.read_at = (m.read_at + 1) % kRingBlocks;
  ++m.read_in_place;
  const uint8_t credit = 1;
  m.send_message(&credit, 1, kCreditTag, what);
}

void UcxLink::recv_all(uint8_t* p, size_t n, const char* what) {
  Impl& m = *impl_;
  while (n > 0) {
    if (m.held_at < m.held.size()) {
      const size_t k = std::min(n, m.held.size() - m.held_at);
      std::memcpy(p, m.held.data() + m.held_at, k);
      m.held_at += k;
      p += k;
      n -= k;
      continue;
    }
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = m.next_message(info, what);
    if (!msg) fail(what, "the peer closed the connection inside a frame");
    if (info.length <= n) {
      // The common case for payload blocks: straight into the caller's buffer.
      m.receive(msg, p, info.length, what);
      p += info.length;
      n -= info.length;
    } else {
      m.held.resize(info.length);
      m.held_at = 0;
      m.receive(msg, m.held.data(), info.length, what);
    }
  }
}

bool UcxLink::recv_first(uint8_t& byte) {
  Impl& m = *impl_;
  if (m.held_at >= m.held.size()) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = m.next_message(info, "data plane");
    if (!msg) return false;  // hung up between frames
    m.held.resize(info.length);
    m.held_at = 0;
    m.receive(msg, m.held.data(), info.length, "data plane");
    if (m.held.empty()) fail("data plane", "an empty UCX message");
  }
  byte = m.held[m.held_at++];
  return true;
}

#else  // built without UCX

std::string ucx_unavailable() { return "this build has no UCX (libucx-dev was not found when it was configured)"; }

struct UcxLink::Impl {};
UcxLink::UcxLink(int, std::chrono::milliseconds, bool) { throw DataChannelError(ucx_unavailable()); }
UcxLink::~UcxLink() = default;
std::vector<uint8_t> UcxLink::address() const { return {}; }
void UcxLink::connect(std::span<const uint8_t>) {}
void UcxLink::send_all(const uint8_t*, size_t, const char*) {}
void UcxLink::recv_all(uint8_t*, size_t, const char*) {}
bool UcxLink::recv_first(uint8_t&) { return false; }
uint8_t* UcxLink::fill_block(uint8_t* spare, const char*) { return spare; }
void UcxLink::send_block(const uint8_t*, size_t, const char*) {}
const uint8_t* UcxLink::recv_block(uint8_t* spare, size_t, const char*) { return spare; }
void UcxLink::done_with_block(const char*) {}
bool UcxLink::sends_through_ring() const { return false; }
uint64_t UcxLink::blocks_read_in_place() const { return 0; }

#endif

}  // namespace actorlm
