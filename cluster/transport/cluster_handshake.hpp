#pragma once
// The join handshake between a head and a worker node, both sides:
//   head -> node  NodeHello
//   node -> head  NodeChallenge (32 random bytes)
//   head -> node  NodeJoin (HMAC-SHA256 of the nonce under the shared secret,
//                 and the head's own fresh nonce)
//   node -> head  NodeWelcome (accepted, or why not; what the node serves)
// The secret never travels. A nonce is good for one join, so a recorded join
// cannot be replayed. Both nonces give the join a session key
// (session_key()); every request the head sends afterwards is sealed with it
// (cluster/transport/request_session.hpp), so requests are bound to that join and not to
// the CAF identity a peer claims.
//
// Beneath it, with a shared secret, a node's port is a gate (cluster/transport/tcp_gate.hpp)
// that authenticates each TCP connection before CAF sees a byte of it; its
// proofs are gate_proof().

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actorlm {

namespace fb {
struct NodeWelcomeT;
}  // namespace fb

inline constexpr uint32_t cluster_protocol = 2;  // 2: joins carry a head nonce, requests are sealed
inline constexpr size_t nonce_bytes = 32;
inline constexpr size_t proof_bytes = 32;  // HMAC-SHA256

std::vector<uint8_t> make_nonce();  // 32 bytes from OpenSSL's CSPRNG
// 64 random bits from the same source: the tokens that name a departed peer
// or allow a stop, which never leave the process that drew them.
uint64_t random_token();
std::vector<uint8_t> join_proof(const std::string& secret, const std::vector<uint8_t>& nonce);
// Constant-time comparison against the expected proof.
bool proof_matches(const std::string& secret, const std::vector<uint8_t>& nonce, const std::vector<uint8_t>& proof);
// Constant-time equality of two MACs (false when the sizes differ).
bool macs_equal(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

// HMAC-SHA256 under `key` of `label` followed by every part, in order.
std::vector<uint8_t> labelled_mac(const std::string& key, const char* label,
                                  std::initializer_list<const std::vector<uint8_t>*> parts);
// The key that seals one joined head's requests to one node.
std::vector<uint8_t> session_key(const std::string& secret, const std::vector<uint8_t>& node_nonce,
                                 const std::vector<uint8_t>& head_nonce);
// A gate's proof that one side of a TCP connection knows the secret. Each
// side proves over both sides' fresh nonces, under its own label, so neither a
// recorded proof nor the peer's own proof reflected back is accepted.
enum class GateSide : uint8_t { dialer, acceptor };
std::vector<uint8_t> gate_proof(const std::string& secret, GateSide side, const std::vector<uint8_t>& dialer_nonce,
                                const std::vector<uint8_t>& acceptor_nonce);

// A fingerprint of a vocabulary (every token's text and type, in order): a
// head and a node must tokenize identically for token ids to mean the same.
uint64_t tokenizer_digest(const Tokenizer& tok);

// What a node serves, as its welcome states it.
struct NodeModel {
  std::string name;
  int32_t vocab_size = 0, n_layers = 0, hidden = 0;
  uint64_t tokenizer_digest = 0;
};
NodeModel describe_model(const std::string& model_path, const ModelConfig& config, const Tokenizer& tok);
// Empty when the head (`mine`) can route to a node serving `theirs`, else why not.
std::string model_mismatch(const NodeModel& mine, const NodeModel& theirs);

// A node's LoRA adapters as its welcome lists them, in one text ("none", or
// "name #id (fingerprint), ..."): two nodes serve the same adapters under
// the same ids when their texts are equal.
std::string adapter_list(const fb::NodeWelcomeT& welcome);

}  // namespace actorlm
