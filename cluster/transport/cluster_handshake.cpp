#include "cluster/transport/cluster_handshake.hpp"

#include "messages/cluster_generated.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <filesystem>
#include <string>
#include <stdexcept>

namespace actorlm {
namespace {

constexpr char join_label[] = "actorlm-join";

std::vector<uint8_t> hmac(const std::string& secret, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned len = 0;
  // An empty key is valid HMAC input: with TLS alone both sides use "".
  static const unsigned char no_key = 0;
  const void* key = secret.empty() ? static_cast<const void*>(&no_key) : secret.data();
  if (!HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), data.data(), data.size(), out.data(), &len)) {
    throw std::runtime_error("OpenSSL HMAC failed");
  }
  out.resize(len);
  return out;
}

}  // namespace

std::vector<uint8_t> make_nonce() {
  std::vector<uint8_t> nonce(32);
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) throw std::runtime_error("OpenSSL RAND_bytes failed");
  return nonce;
}

uint64_t random_token() {
  std::vector<uint8_t> r = make_nonce();
  uint64_t t = 0;
  for (int i = 0; i < 8; ++i) t = (t << 8) | r[static_cast<size_t>(i)];
  return t;
}

std::vector<uint8_t> join_proof(const std::string& secret, const std::vector<uint8_t>& nonce) {
  return labelled_mac(secret, join_label, {&nonce});
}

std::vector<uint8_t> labelled_mac(const std::string& key, const char* label,
                                  std::initializer_list<const std::vector<uint8_t>*> parts) {
  std::vector<uint8_t> data(label, label + std::char_traits<char>::length(label));
  for (const auto* p : parts) data.insert(data.end(), p->begin(), p->end());
  return hmac(key, data);
}

std::vector<uint8_t> session_key(const std::string& secret, const std::vector<uint8_t>& node_nonce,
                                 const std::vector<uint8_t>& head_nonce) {
  return labelled_mac(secret, "actorlm-session", {&node_nonce, &head_nonce});
}

std::vector<uint8_t> gate_proof(const std::string& secret, GateSide side, const std::vector<uint8_t>& dialer_nonce,
                                const std::vector<uint8_t>& acceptor_nonce) {
  const char* label = side == GateSide::dialer ? "actorlm-gate-dialer" : "actorlm-gate-acceptor";
  return labelled_mac(secret, label, {&dialer_nonce, &acceptor_nonce});
}

bool macs_equal(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool proof_matches(const std::string& secret, const std::vector<uint8_t>& nonce, const std::vector<uint8_t>& proof) {
  return macs_equal(join_proof(secret, nonce), proof);
}

uint64_t tokenizer_digest(const Tokenizer& tok) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const uint8_t*>(p)[i];
      h *= 0x100000001b3ull;
    }
  };
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string& text = tok.token_text(id);
    mix(text.data(), text.size());
    auto type = static_cast<int32_t>(tok.token_type(id));
    mix(&type, sizeof type);
  }
  return h;
}

NodeModel describe_model(const std::string& model_path, const ModelConfig& config, const Tokenizer& tok) {
  return {std::filesystem::path(model_path).filename().string(), config.vocab_size, config.n_layers, config.hidden,
          tokenizer_digest(tok)};
}

std::string model_mismatch(const NodeModel& mine, const NodeModel& theirs) {
  if (mine.tokenizer_digest != theirs.tokenizer_digest || mine.vocab_size != theirs.vocab_size) {
    return "the node's tokenizer differs from the head's (node serves " + theirs.name + ", head has " + mine.name + ")";
  }
  if (mine.n_layers != theirs.n_layers || mine.hidden != theirs.hidden) {
    return "the node serves a different model (" + theirs.name + ": " + std::to_string(theirs.n_layers) + " layers, hidden " +
           std::to_string(theirs.hidden) + "; head: " + mine.name + ")";
  }
  return "";
}

std::string adapter_list(const fb::NodeWelcomeT& welcome) {
  std::string out;
  for (const auto& a : welcome.adapters) {
    out += (out.empty() ? "" : ", ") + a->name + " #" + std::to_string(a->id) + " (" + a->fingerprint + ")";
  }
  return out.empty() ? "none" : out;
}

}  // namespace actorlm
