#pragma once
// Prefill/decode KV over the data plane: TCP connections from the prefill
// node to the decode node's data port, beside the middleman, each carrying
// one transfer at a time and kept open for the next (KvDataLinks). The
// control plane stays where it was: the head reserves rows on the decode node
// and gets a ticket, the prefill node's KV sender joins the decode node with
// the shared secret (a sealed session), and commits the first token there
// once every chunk is in. Only the chunks' bytes move here, as frames of
// cluster/transport/data_channel.hpp: sealed with keys derived from that
// joined session (or, on a trusted fabric, only checked), each acknowledged
// on the same connection once written into the reserved rows.
//
// The connection opens with
//   dialer   -> "actorlm-kv1" (11 bytes), protection (1), session id (8), dialer nonce (32)
//   acceptor -> acceptor nonce (32)
//   dialer   -> HMAC-SHA256(session key, "actorlm-data-proof" + both nonces) (32)
// where the session id names the join (derived from its key, so only the two
// ends know it). The acceptor takes no frame from a dialer whose proof fails,
// whose session it does not hold, or whose protection is not its own. Then,
// as sealed frames on the socket, the dialer names the link it wants for the
// rest (the socket, or UCX with its worker's address) and the acceptor
// answers with the one they will use: UCX (with its own address) only when
// both nodes run `--kv-transport ucx` and UCX reaches the peer
// (cluster/transport/ucx_link.hpp), else the socket. Frames go on counting
// across the switch, under the same keys.
//
// Where the pool is in this process's memory (the CPU backend), rows are
// gathered into the send buffer and scattered out of the receive buffer in
// place (KvRowSpans): no copy through the worker. That is safe because no
// step touches them meanwhile: a prefill node's held request runs no more,
// and its rows are released or aborted only once its transfer has stopped
// (the gateway waits for that); a decode node's reserved rows belong to a
// request that does not run until its commit, which the receiver refuses
// while a write is in flight, and an abort waits for those writes
// (KvReceiver's fence). Elsewhere (a device pool) the node's own worker actor
// reads and writes them (kv_read_raw_atom, kv_write_raw_atom) between its
// forward passes.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cluster/transfer/kv_receiver.hpp"
#include "model/kv_layer_clock.hpp"
#include "cluster/transfer/kv_transfer.hpp"
#include "cluster/transport/data_channel.hpp"

namespace actorlm {

// The joined sessions a decode node's data port accepts, by session id.
class DataSessions {
 public:
  // The id a session's key names it by on the data plane.
  static uint64_t id_of(const std::vector<uint8_t>& key);
  uint64_t add(const std::vector<uint8_t>& key);
  void remove(uint64_t id);
  std::optional<std::vector<uint8_t>> key(uint64_t id) const;

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, std::vector<uint8_t>> keys_;
};

// What a decode node's gateway shares with its data port.
struct KvDecodeShared {
  std::shared_ptr<KvReceiver> receiver;
  std::shared_ptr<DataSessions> sessions;
};

// How long a data port keeps a connection silent between transfers, and
// how long a sender keeps an idle one for its next transfer: less, so that
// the sender gives it up first. Long enough to span a long prompt's prefill
// on a CPU (a 2,000-token prompt took 10 s on one Zen 3 core, and a kept
// connection that lapsed meanwhile cost that transfer a new handshake, UCX
// worker and ring: 40-58 ms instead of ~25).
inline constexpr std::chrono::milliseconds kDataPortKeptIdle{120000};
inline constexpr std::chrono::milliseconds kSenderKeptIdle{90000};

// A decode node's data port.
struct KvDataServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  DataProtection protection = DataProtection::sealed;
  DataTransport transport = DataTransport::socket;  // what this node accepts beside the socket
  caf::actor worker;  // writes the rows (kv_write_raw_atom) where `spans` cannot
  KvRowSpans spans;   // the pool's rows in place; empty: through the worker
  std::shared_ptr<KvReceiver> receiver;
  std::shared_ptr<DataSessions> sessions;
  // Told (from this process) about a request whose transfer failed here:
  // (kv_data_failed_atom, local request id, reason).
  caf::actor gateway;
  std::chrono::milliseconds timeout{30000};  // a silent peer; a worker's write
  // A silent peer between transfers: once every chunk of the last transfer
  // over a connection is in, its sender keeps the connection for the next
  // one (KvDataLinks) and sends nothing meanwhile.
  std::chrono::milliseconds kept_idle{kDataPortKeptIdle};
};

class KvDataServer {
 public:
  // Binds and listens; throws std::runtime_error naming the address.
  KvDataServer(caf::actor_system& system, KvDataServerConfig config);
  ~KvDataServer();
  KvDataServer(const KvDataServer&) = delete;
  KvDataServer& operator=(const KvDataServer&) = delete;

  uint16_t port() const { return port_; }
  int64_t chunks() const { return chunks_; }
  int64_t accepted() const { return accepted_; }  // connections taken past the handshake's start

 private:
  void accept_loop();
  void serve(int fd);

  caf::actor_system& system_;
  KvDataServerConfig cfg_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> chunks_{0};
  std::atomic<int64_t> accepted_{0};
  std::mutex mu_;
  std::map<int, std::thread> connections_;  // by socket, until stopped
  std::vector<int> finished_;               // sockets whose thread has ended
  std::thread acceptor_;
};

// What a prefill node's sender needs to reach a decode node's data port.
struct KvDataTarget {
  std::string host;
  uint16_t port = 0;
  std::vector<uint8_t> session_key;  // of the sender's join to that node
  DataProtection protection = DataProtection::sealed;
  DataTransport transport = DataTransport::socket;  // the link to ask for
};

// Lets another thread end a transfer in progress: its socket is shut down,
// so a blocked read or write returns at once.
class KvDataCancel {
 public:
  void cancel();
  bool cancelled() const;
  void attach(int fd);  // the transfer's socket; -1 before it is closed

 private:
  mutable std::mutex mu_;
  int fd_ = -1;
  bool cancelled_ = false;
};

// A transfer that starts before all of its rows are computed (a prefill
// node streams a prompt's KV while its later chunks compute): the sender's
// actor adds rows and the chunks that cover them as they become ready, the
// transfer's thread sends them as they come. Chunk ranges index the whole
// row list, which only grows. Each chunk names the scheduler step that
// writes its rows (0: written already): the thread sends it once that step
// has stored the chunk's layers (KvDataSend::clock).
class KvDataFeed {
 public:
  // The next rows (after those added before) and the new chunks, each with
  // its step (`steps`, one per chunk); `last`: nothing more comes.
  void add(std::span<const int32_t> rows, std::span<const KvChunkRange> chunks, std::span<const uint64_t> steps,
           bool last);
  // Ends the transfer's waiting (it was cut short).
  void stop();
  // Waits at most `wait` for chunks past the caller's plan.size(); then
  // appends the rows and chunks the caller does not have yet and says
  // whether more may come. False when it waited in vain (the caller keeps
  // the connection alive and asks again) or was stopped.
  bool next(std::chrono::milliseconds wait, std::vector<int32_t>& rows, std::vector<KvChunkRange>& plan,
            std::vector<uint64_t>& steps, bool& open);
  bool stopped() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> rows_;
  std::vector<KvChunkRange> plan_;
  std::vector<uint64_t> steps_;  // per chunk of plan_
  bool open_ = true, stopped_ = false;
};

// A sender's data plane connections, kept open between transfers. A
// transfer takes an idle connection to its target (the same host, port,
// joined session, protection and link) that is still open, else dials one:
// TCP, the proof, the keys and, over UCX, a worker and its endpoint (2-3 ms
// on a busy 2-core VM, docs/BENCHMARKS.md: half of a short prompt's
// transfer). A transfer that ends well gives its connection back; any
// failure or cancel closes it. A connection idle past `idle` is closed, not
// reused, before the data port's limit for a silent kept connection
// (kDataPortKeptIdle) closes it from the other end; and a reused connection that fails
// before any answer came back over it is replaced by a new one once, for
// the race where the data port closed it as the transfer began.
class KvDataLinks {
 public:
  struct Connection;  // kv_data_plane.cpp
  explicit KvDataLinks(std::chrono::milliseconds idle = kSenderKeptIdle, size_t per_target = 2);
  ~KvDataLinks();
  KvDataLinks(const KvDataLinks&) = delete;
  KvDataLinks& operator=(const KvDataLinks&) = delete;

  // An idle connection for `target` that is still open, or null.
  std::unique_ptr<Connection> take(const std::string& target);
  // A connection whose transfer ended well; closed when `per_target` others
  // already wait for that target.
  void give_back(const std::string& target, std::unique_ptr<Connection> connection);
  // Connections dialled (tried), and transfers that took one already open.
  int64_t dialled() const;
  int64_t reused() const;
  void count_dial();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct KvDataSend {
  uint64_t ticket = 0;
  std::vector<int32_t> rows;  // the prompt's rows in this node's pool
  std::vector<KvChunkRange> plan;
  // Or, when set, every row and chunk comes from here as they are computed
  // (`rows` and `plan` stay empty), and the transfer has `tokens` rows in all.
  std::shared_ptr<KvDataFeed> feed;
  int32_t tokens = 0;
  // A fed chunk whose step (KvDataFeed) may still be running waits here
  // until that step has stored the chunk's layers; a feed whose chunks name
  // steps needs one.
  std::shared_ptr<KvLayerClock> clock;
  caf::actor worker;          // reads them (kv_read_raw_atom) where `spans` cannot
  KvRowSpans spans;           // the pool's rows in place; empty: through the worker
  std::chrono::milliseconds timeout{30000};
  int64_t corrupt_chunk = -1;  // tests: damage this chunk's bytes on the wire, counted on `sent`
  std::shared_ptr<std::atomic<int64_t>> sent;  // tests: chunks sent by every transfer (corrupt_chunk)
  std::chrono::milliseconds pause_per_chunk{0};  // tests: wait after each chunk (KvSenderConfig)
  std::shared_ptr<KvDataCancel> cancel;  // optional
  std::shared_ptr<KvDataLinks> links;    // optional: a connection per transfer when null
};

struct KvDataResult {
  std::string error;  // empty: every chunk written on the decode node
  int64_t bytes = 0;
  // Of a fed transfer: chunks sent before its last rows were added (while
  // the prompt was still being computed), and of how many.
  int64_t chunks = 0, early_chunks = 0;
  DataTransport transport = DataTransport::socket;  // what carried the chunks
  bool ring = false;  // UCX, the decode node reading the chunks in place (ucx_link.hpp)
  bool reused = false;  // over a connection an earlier transfer opened (KvDataLinks)
};

// Sends one transfer's chunks and waits for every acknowledgement. Blocking:
// run it on a thread of its own.
KvDataResult send_kv_over_data_plane(caf::actor_system& system, const KvDataTarget& target, const KvDataSend& send);

}  // namespace actorlm
