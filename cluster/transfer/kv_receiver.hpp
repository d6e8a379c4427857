#pragma once
// A decode node's open KV transfers (prefill/decode disaggregation). When
// the head reserves rows for a request here, the node opens a transfer under
// a random ticket; a prefill node then names that ticket in every chunk it
// sends and in its commit. The receiver checks each chunk (layout, CRC,
// range, nothing twice: cluster/transfer/kv_transfer.hpp) and turns it into the write
// of those rows; the commit is accepted only once every layer of every token
// has arrived. No CAF: the node's gateway does the messaging.
//
// Tickets are 64 random bits; a chunk that names an unknown one is refused,
// so a peer cannot write into a request it was not handed.
//
// Thread-safe: the node's gateway opens, commits and drops transfers while
// the data plane's connections (cluster/transfer/kv_data_plane.hpp) admit
// chunks.
//
// Writes in flight fence a transfer's end. A data plane chunk is admitted
// from its header, and its write reaches the worker only after the payload
// has been read; were its request aborted in between, the scheduler would
// free the rows and the late write would land in rows another request owns
// by then. So every admitted chunk counts until its caller reports it
// landed() (written in place; or its write queued at the worker, whose
// mailbox puts it before any step the scheduler sends later; or abandoned),
// and a transfer dropped with
// writes in flight stays, refusing new chunks, until the last one lands:
// only then may its request be aborted and its rows reused.

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cluster/transfer/kv_transfer.hpp"

namespace actorlm {

class KvReceiver {
 public:
  explicit KvReceiver(KvLayout layout) : layout_(std::move(layout)) {}

  const KvLayout& layout() const { return layout_; }

  // Local request `request_id` has `rows` reserved, one per prompt token.
  // Returns its ticket (never 0).
  uint64_t open(uint64_t request_id, std::vector<int32_t> rows);

  // What a taken chunk asks of the worker: copy `data` into `rows` for
  // layers [first_layer, last_layer) (ModelRunner::write_kv's layout).
  struct Write {
    std::vector<int32_t> rows;
    int32_t first_layer = 0, last_layer = 0;
    std::vector<uint8_t> data;
  };
  struct Taken {
    std::optional<Write> write;  // set when the chunk is good
    std::string error;           // else why not
    uint64_t request_id = 0;     // the ticket's request (0: no such ticket); fail it on error
    uint64_t ticket = 0;         // with a write: pass to landed() once it is done (or abandoned)
  };
  Taken take(std::span<const uint8_t> chunk);

  // A data plane chunk's header, before any of its bytes are read: the rows
  // and layers its `payload_bytes` go to. The same checks as take() but the
  // CRC (the data plane checks its own frames); `write->data` stays empty.
  Taken admit(uint64_t ticket, int32_t tokens, const KvChunkRange& range, uint64_t payload_bytes);

  // The commit of `ticket`: its request id once every chunk has arrived and
  // landed. Either way the ticket is closed (a second commit is refused).
  struct Committed {
    uint64_t request_id = 0;
    std::string error;
  };
  Committed commit(uint64_t ticket);

  // Closes whatever transfer `request_id` has open (it ended or is being
  // aborted). True when none of its writes is in flight, so its rows may be
  // freed now; false when some are: landed() says when the last is done.
  [[nodiscard]] bool drop_request(uint64_t request_id);

  // A write that take() or admit() handed out is done, or will never be
  // made. True when it was the last of a dropped transfer: the caller may
  // now abort that transfer's request.
  [[nodiscard]] bool landed(uint64_t ticket);

  // Whether `ticket` is open with chunks still to come (false once every
  // chunk has arrived, or when it is closed or unknown).
  bool expects_more(uint64_t ticket) const;

  // Writes handed out and not yet landed, over every transfer.
  int64_t writes_in_flight() const;
  size_t open_transfers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return open_.size();
  }

 private:
  struct Open {
    uint64_t request_id = 0;
    std::vector<int32_t> rows;
    KvAssembly assembly;
    int64_t writing = 0;   // writes handed out, not yet landed
    bool dropped = false;  // closed with writes in flight: refuses chunks, waits for them
  };
  Taken admit_locked(const KvChunk& chunk);
  // Erases the transfer, or marks it dropped while writes are in flight.
  // True when it was erased.
  bool close_locked(std::map<uint64_t, Open>::iterator it);

  KvLayout layout_;
  mutable std::mutex mu_;
  std::map<uint64_t, Open> open_;  // by ticket
};

}  // namespace actorlm
