#include "cluster/transport/request_session.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>
#include <stdexcept>

namespace actorlm {
namespace {

constexpr char label[] = "actorlm-request";

std::vector<uint8_t> mac(const std::vector<uint8_t>& key, RequestKind kind, uint64_t seq, std::span<const uint8_t> payload) {
  std::vector<uint8_t> data(label, label + sizeof(label) - 1);
  data.push_back(static_cast<uint8_t>(kind));
  for (int i = 0; i < 8; ++i) data.push_back(static_cast<uint8_t>(seq >> (8 * i)));
  data.insert(data.end(), payload.begin(), payload.end());
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), out.data(), &len)) {
    throw std::runtime_error("OpenSSL HMAC failed");
  }
  out.resize(len);
  return out;
}

}  // namespace

std::vector<uint8_t> RequestSession::seal(RequestKind kind, std::span<const uint8_t> payload) {
  if (key_.empty()) throw std::logic_error("RequestSession::seal without a session key");
  const uint64_t seq = next_++;
  std::vector<uint8_t> out;
  out.reserve(overhead + payload.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(seq >> (8 * i)));
  std::vector<uint8_t> tag = mac(key_, kind, seq, payload);
  out.insert(out.end(), tag.begin(), tag.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::optional<std::vector<uint8_t>> RequestSession::open(RequestKind kind, std::span<const uint8_t> sealed) {
  if (key_.empty() || sealed.size() < overhead) return std::nullopt;
  uint64_t seq = 0;
  for (int i = 0; i < 8; ++i) seq |= uint64_t{sealed[static_cast<size_t>(i)]} << (8 * i);
  if (seq <= last_open_) return std::nullopt;
  std::span<const uint8_t> payload = sealed.subspan(overhead);
  std::vector<uint8_t> expected = mac(key_, kind, seq, payload);
  if (expected.size() != 32 || CRYPTO_memcmp(expected.data(), sealed.data() + 8, 32) != 0) return std::nullopt;
  last_open_ = seq;
  return std::vector<uint8_t>(payload.begin(), payload.end());
}

}  // namespace actorlm
