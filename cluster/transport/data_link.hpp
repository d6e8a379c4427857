#pragma once
// The byte stream the data plane's frames (data_channel.hpp) travel on: a
// connected TCP socket, or UCX (ucx_link.hpp) where it reaches the peer
// through shared memory or RDMA. The frames' cipher, sequence numbers and
// bounds are the same on either, so a link carries only bytes it cannot
// forge undetected.

#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace actorlm {

// A broken frame, a peer that closed, a socket error: the connection is done.
struct DataChannelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What carries a transfer's frames once the connection's handshake is done.
enum class DataTransport : uint8_t { socket = 0, ucx = 1 };

class DataLink {
 public:
  virtual ~DataLink() = default;
  // All of `n` bytes; DataChannelError naming `what` when the peer closes,
  // the link fails or a wait runs past the link's timeout.
  virtual void send_all(const uint8_t* p, size_t n, const char* what) = 0;
  virtual void recv_all(uint8_t* p, size_t n, const char* what) = 0;
  // The first byte of the next frame, or false when the peer closed cleanly
  // before sending one.
  virtual bool recv_first(uint8_t& byte) = 0;

  // A frame's payload blocks (at most 1 MiB each) go through these, so that
  // a link whose peer can read this end's memory in place (UCX between two
  // processes of one machine, ucx_link.hpp) moves them without a copy. The
  // sender fills the block fill_block() gives (its own `spare` buffer, or
  // one of the link's) and hands it to send_block(); the receiver reads each
  // block where recv_block() says (read into `spare`, or in the sender's
  // memory, which it must not write) and calls
  // done_with_block() before asking for the next.
  virtual uint8_t* fill_block(uint8_t* spare, const char*) { return spare; }
  virtual void send_block(const uint8_t* p, size_t n, const char* what) { send_all(p, n, what); }
  virtual const uint8_t* recv_block(uint8_t* spare, size_t n, const char* what) {
    recv_all(spare, n, what);
    return spare;
  }
  virtual void done_with_block(const char*) {}
};

// All of `n` bytes to or from a connected stream socket, retried on EINTR;
// DataChannelError naming `what` when the peer closes or the socket fails
// (a timeout set on the socket counts as failing).
void send_all(int fd, const uint8_t* p, size_t n, const char* what);
void recv_all(int fd, uint8_t* p, size_t n, const char* what);

// A connected stream socket (the caller's: never closed here).
class SocketLink final : public DataLink {
 public:
  explicit SocketLink(int fd) : fd_(fd) {}
  void send_all(const uint8_t* p, size_t n, const char* what) override { actorlm::send_all(fd_, p, n, what); }
  void recv_all(uint8_t* p, size_t n, const char* what) override { actorlm::recv_all(fd_, p, n, what); }
  bool recv_first(uint8_t& byte) override;

 private:
  int fd_;
};

}  // namespace actorlm
