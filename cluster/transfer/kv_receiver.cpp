#include "cluster/transfer/kv_receiver.hpp"

#include "cluster/transport/cluster_handshake.hpp"

namespace actorlm {

uint64_t KvReceiver::open(uint64_t request_id, std::vector<int32_t> rows) {
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
  auto it = open_.find(chunk->request_id);
  if (it == open_.end()) {
    out.error = "KV chunk for a ticket this node did not issue (or has closed)";
    return out;
  }
  out.request_id = it->second.request_id;
  if (auto refused = it->second.assembly.accept(*chunk)) {
    out.error = *refused;
    return out;
  }
  const KvChunkRange& r = chunk->range;
  const auto& rows = it->second.rows;
  out.write = Write{std::vector<int32_t>(rows.begin() + r.first_token, rows.begin() + r.last_token), r.first_layer,
                    r.last_layer, std::move(chunk->data)};
  return out;
}

KvReceiver::Committed KvReceiver::commit(uint64_t ticket) {
  Committed out;
  auto it = open_.find(ticket);
  if (it == open_.end()) {
    out.error = "KV commit for a ticket this node did not issue (or has closed)";
    return out;
  }
  out.request_id = it->second.request_id;
  if (!it->second.assembly.complete()) {
    out.error = "KV commit with " + std::to_string(it->second.assembly.missing()) + " layer-token rows still missing";
  }
  open_.erase(it);
  return out;
}

void KvReceiver::drop_request(uint64_t request_id) {
  std::erase_if(open_, [&](const auto& kv) { return kv.second.request_id == request_id; });
}

}  // namespace actorlm
