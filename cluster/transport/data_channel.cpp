#include "cluster/transport/data_channel.hpp"

#include <openssl/evp.h>
#include <sys/socket.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cluster/transport/cluster_handshake.hpp"
#include "cluster/transport/little_endian.hpp"

namespace actorlm {
namespace {

constexpr size_t kPrefix = 12;         // u32 header length, u64 payload length
constexpr size_t kTag = 16;            // GCM tag, or XXH3-128
constexpr size_t kBuffer = 1u << 20;   // what each end encrypts or reads at once
// A piece of rows at least this long is sealed straight from the rows into
// the send buffer, or opened straight from the receive buffer into its rows
// (one pass over its bytes instead of a copy and a pass); shorter ones are
// gathered first, because the cipher is slow on short calls.
constexpr size_t kDirect = 16u << 10;

EVP_CIPHER_CTX* cipher(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }

// Message `n` of a direction: the header of frame s is 2s, its payload 2s + 1.
std::array<uint8_t, 12> nonce(uint64_t n) {
  std::array<uint8_t, 12> iv{};
  put_le<uint64_t>(iv.data() + 4, n);
  return iv;
}

// A trusted fabric's tag: XXH3-128 of the plain bytes (tens of GB/s; a
// check against damage, not against anyone).
struct Digest {
  XXH3_state_t* state = XXH3_createState();
  ~Digest() { XXH3_freeState(state); }
  void reset() { XXH3_128bits_reset(state); }
  void add(const uint8_t* p, size_t n) { XXH3_128bits_update(state, p, n); }
  void tag(uint8_t* out) const {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(state));
    std::memcpy(out, c.digest, sizeof c.digest);
  }
  bool matches(const uint8_t* tag) const {
    uint8_t want[16];
    this->tag(want);
    return std::memcmp(want, tag, sizeof want) == 0;
  }
};

void fail_if(bool bad, const char* what) {
  if (bad) throw DataChannelError(what);
}

void* new_context(const DataKey& key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  fail_if(!ctx, "out of memory for a cipher context");
  // The key is set once; each message sets only its nonce.
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                         : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    throw DataChannelError("AES-256-GCM is not available");
  }
  return ctx;
}

}  // namespace

void send_all(int fd, const uint8_t* p, size_t n, const char* what) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) throw DataChannelError(std::string(what) + ": the peer stopped reading (timed out)");
    if (w <= 0) throw DataChannelError(std::string(what) + ": send failed: " + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void recv_all(int fd, uint8_t* p, size_t n, const char* what) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) throw DataChannelError(std::string(what) + ": the peer closed the connection inside a frame");
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) throw DataChannelError(std::string(what) + ": the peer fell silent (timed out)");
    if (r < 0) throw DataChannelError(std::string(what) + ": receive failed: " + std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

DataKeys derive_data_keys(const std::vector<uint8_t>& session_key, const std::vector<uint8_t>& dialer_nonce,
                          const std::vector<uint8_t>& acceptor_nonce) {
  const std::string key(session_key.begin(), session_key.end());
  auto derive = [&](const char* label, DataKey& out) {
    const std::vector<uint8_t> mac = labelled_mac(key, label, {&dialer_nonce, &acceptor_nonce});
    fail_if(mac.size() != out.size(), "HMAC-SHA256 failed");
    std::copy(mac.begin(), mac.end(), out.begin());
  };
  DataKeys keys;
  derive("actorlm-data-dialer", keys.dialer_to_acceptor);
  derive("actorlm-data-acceptor", keys.acceptor_to_dialer);
  return keys;
}

bool SocketLink::recv_first(uint8_t& byte) {
  ssize_t r;
  do {
    r = ::recv(fd_, &byte, 1, 0);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) throw DataChannelError("data plane: the peer fell silent (timed out)");
  if (r < 0) throw DataChannelError(std::string("data plane receive failed: ") + std::strerror(errno));
  return true;
}

DataSender::DataSender(DataLink& link, DataProtection protection, const DataKey& key)
    : link_(&link), protection_(protection), key_(key), buffer_(kBuffer + kTag) {
  if (protection_ == DataProtection::sealed) ctx_ = new_context(key_, true);
}

DataSender::DataSender(int fd, DataProtection protection, const DataKey& key)
    : own_(std::make_unique<SocketLink>(fd)), link_(own_.get()), protection_(protection), key_(key), buffer_(kBuffer + kTag) {
  if (protection_ == DataProtection::sealed) ctx_ = new_context(key_, true);
}

DataSender::~DataSender() { EVP_CIPHER_CTX_free(cipher(ctx_)); }

void DataSender::send(std::span<const uint8_t> header, std::span<const std::span<const uint8_t>> pieces) {
  fail_if(header.size() > kMaxDataHeader, "a data plane header over 4 KiB");
  uint64_t payload = 0;
  for (const auto& p : pieces) payload += p.size();
  uint8_t prefix[kPrefix];
  put_le<uint32_t>(prefix, static_cast<uint32_t>(header.size()));
  put_le<uint64_t>(prefix + 4, payload);
  const bool sealed = protection_ == DataProtection::sealed;
  EVP_CIPHER_CTX* ctx = cipher(ctx_);
  int len = 0;
  uint8_t* out = buffer_.data();
  Digest digest;
  // The prefix and header (with its tag) go out as one write.
  std::memcpy(out, prefix, kPrefix);
  uint8_t* h = out + kPrefix;
  if (!header.empty()) std::memcpy(h, header.data(), header.size());
  const int hlen = static_cast<int>(header.size());
  if (sealed) {
    const auto iv = nonce(2 * seq_);
    fail_if(EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data()) != 1 ||
                EVP_EncryptUpdate(ctx, nullptr, &len, prefix, kPrefix) != 1 ||
                (hlen > 0 && EVP_EncryptUpdate(ctx, h, &len, h, hlen) != 1) ||
                EVP_EncryptFinal_ex(ctx, h + hlen, &len) != 1 ||
                EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTag, h + hlen) != 1,
            "sealing a data plane header failed");
  } else {
    digest.reset();
    digest.add(prefix, kPrefix);
    digest.add(h, header.size());
    digest.tag(h + hlen);
  }
  link_->send_all(out, kPrefix + header.size() + kTag, "data plane");

  // The payload: gathered piece by piece into the buffer, and each full
  // buffer sealed in place with one call (the cipher is several times faster
  // on a megabyte than on a row) or hashed, then written. A long piece is
  // sealed straight into the buffer instead (kDirect).
  if (sealed) {
    const auto iv = nonce(2 * seq_ + 1);
    fail_if(EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data()) != 1, "sealing a payload failed");
  } else {
    digest.reset();
  }
  // The block being filled: this sender's buffer, or one of the link's that
  // the peer reads in place (DataLink::fill_block).
  uint8_t* block = nullptr;
  size_t filled = 0;
  size_t open_from = 0;  // block bytes [open_from, filled) are gathered, not yet sealed
  auto seal_gathered = [&] {
    if (filled > open_from) {
      fail_if(EVP_EncryptUpdate(ctx, block + open_from, &len, block + open_from, static_cast<int>(filled - open_from)) != 1,
              "sealing a payload failed");
    }
    open_from = filled;
  };
  auto flush = [&] {
    if (sealed) {
      seal_gathered();
    } else {
      digest.add(block, filled);
    }
    if (damage_next_) {
      block[filled / 2] ^= 0x10;
      damage_next_ = false;
    }
    link_->send_block(block, filled, "data plane");
    block = nullptr;
    filled = open_from = 0;
  };
  for (const auto& piece : pieces) {
    for (size_t at = 0; at < piece.size();) {
      if (!block) block = link_->fill_block(out, "data plane");
      const size_t n = std::min(piece.size() - at, kBuffer - filled);
      if (sealed && n >= kDirect) {
        seal_gathered();
        fail_if(EVP_EncryptUpdate(ctx, block + filled, &len, piece.data() + at, static_cast<int>(n)) != 1,
                "sealing a payload failed");
        open_from = filled + n;
      } else {
        std::memcpy(block + filled, piece.data() + at, n);
      }
      filled += n;
      at += n;
      if (filled == kBuffer) flush();
    }
  }
  if (filled > 0) flush();
  if (sealed) {
    fail_if(EVP_EncryptFinal_ex(ctx, out, &len) != 1 || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTag, out) != 1,
            "sealing a payload failed");
  } else {
    digest.tag(out);
  }
  link_->send_all(out, kTag, "data plane");
  ++seq_;
}

DataReceiver::DataReceiver(DataLink& link, DataProtection protection, const DataKey& key, uint64_t max_payload)
    : link_(&link), protection_(protection), key_(key), max_payload_(max_payload), buffer_(kBuffer) {
  if (protection_ == DataProtection::sealed) ctx_ = new_context(key_, false);
}

DataReceiver::DataReceiver(int fd, DataProtection protection, const DataKey& key, uint64_t max_payload)
    : own_(std::make_unique<SocketLink>(fd)), link_(own_.get()), protection_(protection), key_(key),
      max_payload_(max_payload), buffer_(kBuffer) {
  if (protection_ == DataProtection::sealed) ctx_ = new_context(key_, false);
}

DataReceiver::~DataReceiver() { EVP_CIPHER_CTX_free(cipher(ctx_)); }

bool DataReceiver::next(std::vector<uint8_t>& header, uint64_t& payload_bytes) {
  fail_if(in_frame_, "the previous frame's payload was not read");
  uint8_t prefix[kPrefix];
  // A clean close is one before any byte of a frame.
  if (!link_->recv_first(prefix[0])) return false;
  link_->recv_all(prefix + 1, kPrefix - 1, "data plane");
  const auto hlen = get_le<uint32_t>(prefix);
  const auto plen = get_le<uint64_t>(prefix + 4);
  fail_if(hlen > kMaxDataHeader, "a data plane header over 4 KiB");
  header.resize(hlen + kTag);
  link_->recv_all(header.data(), header.size(), "data plane");
  const uint8_t* tag = header.data() + hlen;
  if (protection_ == DataProtection::sealed) {
    EVP_CIPHER_CTX* ctx = cipher(ctx_);
    int len = 0;
    const auto iv = nonce(2 * seq_);
    fail_if(EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data()) != 1 ||
                EVP_DecryptUpdate(ctx, nullptr, &len, prefix, kPrefix) != 1 ||
                (hlen > 0 && EVP_DecryptUpdate(ctx, header.data(), &len, header.data(), static_cast<int>(hlen)) != 1) ||
                EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTag, const_cast<uint8_t*>(tag)) != 1,
            "opening a data plane header failed");
    // A wrong key, a damaged or replayed frame: the tag does not match.
    uint8_t none[16];
    fail_if(EVP_DecryptFinal_ex(ctx, none, &len) != 1, "a data plane header fails its tag");
  } else {
    Digest digest;
    digest.reset();
    digest.add(prefix, kPrefix);
    digest.add(header.data(), hlen);
    fail_if(!digest.matches(tag), "a data plane header fails its check");
  }
  header.resize(hlen);
  // Only a verified header's length is believed.
  fail_if(plen > max_payload_, "a data plane payload over the receiver's bound");
  payload_bytes = pending_ = plen;
  in_frame_ = true;
  return true;
}

void DataReceiver::read_payload(std::span<const std::span<uint8_t>> into) {
  fail_if(!in_frame_, "no frame header was read");
  uint64_t total = 0;
  for (const auto& s : into) total += s.size();
  fail_if(total != pending_, "the destination does not match the payload's size");
  const bool sealed = protection_ == DataProtection::sealed;
  EVP_CIPHER_CTX* ctx = cipher(ctx_);
  int len = 0;
  Digest digest;
  if (sealed) {
    const auto iv = nonce(2 * seq_ + 1);
    fail_if(EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data()) != 1, "opening a payload failed");
  } else {
    digest.reset();
  }
  // The wire is read in blocks of up to kBuffer (few system calls, however
  // small the rows). Sealed, a long run of one destination piece is opened
  // straight into it (kDirect); runs of short ones are opened in place with
  // one call, then copied out. On a trusted fabric each block is hashed, then
  // copied out.
  size_t piece = 0, at = 0;  // the destination: into[piece], byte at
  auto next_piece = [&](size_t& p, size_t& a) {
    while (a == into[p].size()) ++p, a = 0;
  };
  for (uint64_t left = pending_; left > 0;) {
    const size_t block = static_cast<size_t>(std::min<uint64_t>(left, kBuffer));
    // `src` is this receiver's buffer, or the sender's memory read in place
    // (DataLink::recv_block): nothing is written there. (The sender could
    // change its bytes while they are read, as it could send other bytes;
    // the tag guards against everyone else, who cannot write there.)
    uint8_t* buf = buffer_.data();
    const uint8_t* src = link_->recv_block(buf, block, "data plane");
    for (size_t used = 0; used < block;) {
      next_piece(piece, at);
      const size_t n = std::min(block - used, into[piece].size() - at);
      if (sealed && n >= kDirect) {
        fail_if(EVP_DecryptUpdate(ctx, into[piece].data() + at, &len, src + used, static_cast<int>(n)) != 1,
                "opening a payload failed");
        used += n;
        at += n;
        continue;
      }
      // The run of short pieces from here (the whole block, unsealed).
      size_t end = used, p = piece, a = at;
      while (end < block) {
        next_piece(p, a);
        const size_t m = std::min(block - end, into[p].size() - a);
        if (sealed && m >= kDirect) break;
        end += m;
        a += m;
      }
      const uint8_t* plain = src;
      if (sealed) {
        fail_if(EVP_DecryptUpdate(ctx, buf + used, &len, src + used, static_cast<int>(end - used)) != 1,
                "opening a payload failed");
        plain = buf;
      } else {
        digest.add(src + used, end - used);
      }
      while (used < end) {
        next_piece(piece, at);
        const size_t m = std::min(end - used, into[piece].size() - at);
        std::memcpy(into[piece].data() + at, plain + used, m);
        used += m;
        at += m;
      }
    }
    link_->done_with_block("data plane");
    left -= block;
  }
  uint8_t tag[kTag];
  link_->recv_all(tag, kTag, "data plane");
  in_frame_ = false;
  ++seq_;
  if (sealed) {
    uint8_t none[16];
    fail_if(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTag, tag) != 1, "opening a payload failed");
    fail_if(EVP_DecryptFinal_ex(ctx, none, &len) != 1, "a data plane payload fails its tag");
  } else {
    fail_if(!digest.matches(tag), "a data plane payload fails its check");
  }
}

void DataReceiver::skip_payload() {
  std::vector<uint8_t> scratch(static_cast<size_t>(std::min<uint64_t>(pending_, kBuffer)));
  // Read through the scratch block again and again: nothing is kept.
  const uint64_t total = pending_;
  std::vector<std::span<uint8_t>> into;
  for (uint64_t at = 0; at < total; at += scratch.size()) {
    into.emplace_back(scratch.data(), static_cast<size_t>(std::min<uint64_t>(scratch.size(), total - at)));
  }
  read_payload(into);
}

}  // namespace actorlm
