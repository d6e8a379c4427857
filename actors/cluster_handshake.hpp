#pragma once
// The join handshake between a head and a worker node, both sides:
//   head -> node  NodeHello
//   node -> head  NodeChallenge (32 random bytes)
//   head -> node  NodeJoin (HMAC-SHA256 of the nonce under the shared secret)
//   node -> head  NodeWelcome (accepted, or why not; what the node serves)
// The secret never travels. A nonce is good for one join from the node that
// asked for it, so a recorded join cannot be replayed.

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actorlm {

inline constexpr uint32_t cluster_protocol = 1;

std::vector<uint8_t> make_nonce();  // 32 bytes from OpenSSL's CSPRNG
std::vector<uint8_t> join_proof(const std::string& secret, const std::vector<uint8_t>& nonce);
// Constant-time comparison against the expected proof.
bool proof_matches(const std::string& secret, const std::vector<uint8_t>& nonce, const std::vector<uint8_t>& proof);

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

}  // namespace actorlm
