#pragma once
// UCX under the data plane: a connection's frames over UCX's tagged
// messages once its TCP handshake is done, so that two nodes on one machine
// move KV through shared memory (one copy, by the receiver, with cross-memory
// attach) and nodes with RDMA through the NIC, never through the kernel's
// socket buffers. The TCP connection stays open beside it as the link's
// lifeline: the peer hanging up, or a local cancel shutting the socket down,
// ends every wait here at once.
//
// Each link has a UCX worker of its own (so tags need not tell connections
// apart); the two ends swap worker addresses inside sealed frames over the
// TCP connection (kv_data_plane.cpp) and each opens an endpoint to the
// other. A send_all() is one tagged message; a recv_all() takes the next
// message straight into the caller's buffer when it fits (the payload blocks
// of a frame, which both ends cut alike), else through a held copy.
//
// Two processes of one machine go one copy further: the dialing end (the
// one that sends KV) offers a ring of four 1 MiB blocks in memory UCX can
// share, its address carries the ring's key, and a peer that can map it
// says so in its answer; the payload blocks of frames are then sealed (or
// copied) by the sender straight into the ring and opened by the receiver
// straight out of it (DataLink::fill_block / recv_block), with a short
// message for each block filled and one back for each block read, and no
// copy between the two. Where the peer cannot map it (another machine), the
// blocks travel as messages.
//
// Unless UCX_TLS names transports, UCX's TCP transport is left out: it would
// listen on every interface, and over TCP the plain socket link is the one
// measured faster (docs/BENCHMARKS.md). Between two machines without RDMA,
// then, UCX cannot reach the peer, connect() says so, and the connection
// stays on its socket.

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cluster/transport/data_link.hpp"

namespace actorlm {

// Empty when this build has UCX and it starts here; else why not.
std::string ucx_unavailable();

class UcxLink final : public DataLink {
 public:
  // `control`: the connection's TCP socket (the caller's); `timeout`: the
  // longest any one wait may take; `offer_ring`: this end sends payloads and
  // offers its peer a ring to read them in place. Throws DataChannelError
  // when UCX is unavailable.
  UcxLink(int control, std::chrono::milliseconds timeout, bool offer_ring = false);
  ~UcxLink() override;
  UcxLink(const UcxLink&) = delete;
  UcxLink& operator=(const UcxLink&) = delete;

  // This link's address for the peer: its worker's, its ring's key if it
  // offers one, and whether it reads the peer's ring (known once connected).
  std::vector<uint8_t> address() const;
  // Opens the endpoint to the peer's worker (and maps its ring where it can).
  // Throws DataChannelError when no transport UCX may use reaches it or the
  // address is malformed.
  void connect(std::span<const uint8_t> peer_address);

  void send_all(const uint8_t* p, size_t n, const char* what) override;
  void recv_all(uint8_t* p, size_t n, const char* what) override;
  bool recv_first(uint8_t& byte) override;
  uint8_t* fill_block(uint8_t* spare, const char* what) override;
  void send_block(const uint8_t* p, size_t n, const char* what) override;
  const uint8_t* recv_block(uint8_t* spare, size_t n, const char* what) override;
  void done_with_block(const char* what) override;

  // The longest any one wait may take from now on (a data port waits
  // longer for a kept connection's next transfer than inside one).
  void set_timeout(std::chrono::milliseconds timeout);

  // Whether payload blocks sent here go through the ring (the peer maps it),
  // and how many blocks this end has read in place from the peer's.
  bool sends_through_ring() const;
  uint64_t blocks_read_in_place() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm
