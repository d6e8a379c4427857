#include "cluster/transfer/kv_receiver.hpp"

#include "cluster/transport/cluster_handshake.hpp"

namespace actorlm {

uint64_t KvReceiver::open(uint64_t request_id, std::vector<int32_t> rows) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t ticket = 0;
  while (ticket == 0 || open_.count(ticket)) ticket = random_token();
  const auto tokens = static_cast<int32_t>(rows.size());
  open_.emplace(ticket, Open{request_id, std::move(rows), KvAssembly(ticket, tokens, layout_.n_layers)});
  return ticket;
}

KvReceiver::Taken KvReceiver::take(std::span<const uint8_t> bytes) {
  Taken out;
  auto chunk = decode_kv_chunk(bytes, layout_, &out.error);
  if (!chunk) return out;
  std::lock_guard<std::mutex> lock(mu_);
  out = admit_locked(*chunk);
  if (out.write) out.write->data = std::move(chunk->data);
  return out;
}

KvReceiver::Taken KvReceiver::admit(uint64_t ticket, int32_t tokens, const KvChunkRange& r, uint64_t payload_bytes) {
  Taken out;
  if (tokens <= 0 || r.first_layer < 0 || r.first_layer >= r.last_layer || r.last_layer > layout_.n_layers ||
      r.first_token < 0 || r.first_token >= r.last_token || r.last_token > tokens) {
    out.error = "KV chunk range outside its transfer";
  } else if (payload_bytes != static_cast<uint64_t>(r.bytes(layout_))) {
    out.error = "KV chunk of " + std::to_string(payload_bytes) + " bytes; its range needs " + std::to_string(r.bytes(layout_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!out.error.empty()) {
    // Still name the ticket's request, so that the caller fails it.
    if (auto it = open_.find(ticket); it != open_.end()) out.request_id = it->second.request_id;
    return out;
  }
  return admit_locked(KvChunk{ticket, tokens, r, {}});
}

KvReceiver::Taken KvReceiver::admit_locked(const KvChunk& chunk) {
  Taken out;
  auto it = open_.find(chunk.request_id);
  if (it == open_.end() || it->second.dropped) {
    out.error = "KV chunk for a ticket this node did not issue (or has closed)";
    return out;
  }
  out.request_id = it->second.request_id;
  if (auto refused = it->second.assembly.accept(chunk)) {
    out.error = *refused;
    return out;
  }
  const KvChunkRange& r = chunk.range;
  const auto& rows = it->second.rows;
  out.write = Write{std::vector<int32_t>(rows.begin() + r.first_token, rows.begin() + r.last_token), r.first_layer,
                    r.last_layer, {}};
  out.ticket = chunk.request_id;
  ++it->second.writing;
  return out;
}

KvReceiver::Committed KvReceiver::commit(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  Committed out;
  auto it = open_.find(ticket);
  if (it == open_.end() || it->second.dropped) {
    out.error = "KV commit for a ticket this node did not issue (or has closed)";
    return out;
  }
  out.request_id = it->second.request_id;
  if (!it->second.assembly.complete()) {
    out.error = "KV commit with " + std::to_string(it->second.assembly.missing()) + " layer-token rows still missing";
  } else if (it->second.writing > 0) {
    // A sender commits after its chunks were acknowledged, which is after
    // they were written: one that does not is not to be believed.
    out.error = "KV commit while " + std::to_string(it->second.writing) + " chunk(s) are still being written";
  }
  (void)close_locked(it);
  return out;
}

bool KvReceiver::close_locked(std::map<uint64_t, Open>::iterator it) {
  if (it->second.writing > 0) {
    it->second.dropped = true;
    return false;
  }
  open_.erase(it);
  return true;
}

bool KvReceiver::drop_request(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  bool quiet = true;
  for (auto it = open_.begin(); it != open_.end();) {
    auto next = std::next(it);
    if (it->second.request_id == request_id && !close_locked(it)) quiet = false;
    it = next;
  }
  return quiet;
}

bool KvReceiver::landed(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(ticket);
  if (it == open_.end() || it->second.writing == 0) return false;  // not a write this receiver handed out
  if (--it->second.writing > 0 || !it->second.dropped) return false;
  open_.erase(it);
  return true;
}

bool KvReceiver::expects_more(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = open_.find(ticket);
  return it != open_.end() && !it->second.dropped && !it->second.assembly.complete();
}

int64_t KvReceiver::writes_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [ticket, open] : open_) n += open.writing;
  return n;
}

}  // namespace actorlm
