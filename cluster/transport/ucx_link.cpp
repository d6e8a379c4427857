#include "cluster/transport/ucx_link.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#ifdef ACTORLM_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace actorlm {

#ifdef ACTORLM_HAVE_UCX
namespace {

// Every message of a link has this tag: the worker is the link's alone.
constexpr ucp_tag_t kTag = 0xac70'd47aull;
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
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
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

UcxLink::UcxLink(int control, std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
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
}

UcxLink::~UcxLink() {
  impl_->close_endpoint();
  ucp_worker_destroy(impl_->worker);
}

std::vector<uint8_t> UcxLink::address() const {
  ucp_address_t* a = nullptr;
  size_t n = 0;
  const ucs_status_t s = ucp_worker_get_address(impl_->worker, &a, &n);
  if (s != UCS_OK) throw DataChannelError(std::string("UCX worker address: ") + ucs_status_string(s));
  std::vector<uint8_t> out(reinterpret_cast<const uint8_t*>(a), reinterpret_cast<const uint8_t*>(a) + n);
  ucp_worker_release_address(impl_->worker, a);
  return out;
}

void UcxLink::connect(std::span<const uint8_t> peer_address) {
  if (impl_->ep) throw DataChannelError("UCX link already connected");
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  // No peer failure handling (UCX's shared-memory transports have none): a
  // peer that dies shows as its TCP connection closing, which every wait
  // here watches.
  p.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  const ucs_status_t s = ucp_ep_create(impl_->worker, &p, &impl_->ep);
  if (s != UCS_OK) {
    impl_->ep = nullptr;
    throw DataChannelError(std::string("UCX cannot reach the peer: ") + ucs_status_string(s));
  }
}

void UcxLink::send_all(const uint8_t* p, size_t n, const char* what) {
  if (n == 0) return;
  if (!impl_->ep) fail(what, "UCX link not connected");
  ucp_request_param_t prm{};
  impl_->finish(ucp_tag_send_nbx(impl_->ep, p, n, kTag, &prm), what);
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
UcxLink::UcxLink(int, std::chrono::milliseconds) { throw DataChannelError(ucx_unavailable()); }
UcxLink::~UcxLink() = default;
std::vector<uint8_t> UcxLink::address() const { return {}; }
void UcxLink::connect(std::span<const uint8_t>) {}
void UcxLink::send_all(const uint8_t*, size_t, const char*) {}
void UcxLink::recv_all(uint8_t*, size_t, const char*) {}
bool UcxLink::recv_first(uint8_t&) { return false; }

#endif

}  // namespace actorlm
