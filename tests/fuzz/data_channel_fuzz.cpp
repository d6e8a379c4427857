// Fuzzes the data plane's frame reader (cluster/transport/data_channel.hpp),
// what a decode node's data port reads from a peer once the handshake is
// done, over a real socket pair. Contract: arbitrary bytes end in a clean
// close or a DataChannelError, never a crash, hang or allocation beyond the
// bounds; frames a DataSender wrote come out exactly as written; and with one
// byte of them flipped, no frame from the flip on comes out.
//
// Input: byte 0 picks the protection (bit 0: trusted fabric) and the mode
// (bit 1). Mode 0: the rest is the byte stream. Mode 1: the rest is cut into
// frames (each: a length byte for the header, a length byte for the payload,
// then those bytes), sent by a DataSender under the right key, and, when
// byte 1 is odd, the byte at the position bytes 2-3 name is flipped on the way.

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cluster/transport/data_channel.hpp"

using namespace actorlm;

namespace {

struct Frame {
  std::vector<uint8_t> header, payload;
  bool operator==(const Frame&) const = default;
};

const DataKeys& keys() {
  static const DataKeys k = derive_data_keys(std::vector<uint8_t>(32, 9), std::vector<uint8_t>(32, 1),
                                             std::vector<uint8_t>(32, 2));
  return k;
}

// Every frame `bytes` holds, until a clean close or the first error.
std::vector<Frame> read_frames(const std::vector<uint8_t>& bytes, DataProtection p, bool* failed) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  std::thread writer([&] {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t w = ::send(fds[0], bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (w <= 0) break;
      at += static_cast<size_t>(w);
    }
    ::shutdown(fds[0], SHUT_WR);
  });
  std::vector<Frame> out;
  *failed = false;
  try {
    DataReceiver r(fds[1], p, keys().dialer_to_acceptor, 1 << 16);
    Frame f;
    uint64_t n = 0;
    while (r.next(f.header, n)) {
      f.payload.assign(n, 0);
      const std::span<uint8_t> into[] = {{f.payload.data(), f.payload.size()}};
      r.read_payload(into);
      out.push_back(f);
    }
  } catch (const DataChannelError&) {
    *failed = true;
  }
  ::shutdown(fds[1], SHUT_RDWR);  // a writer blocked on a full buffer gives up
  writer.join();
  ::close(fds[0]);
  ::close(fds[1]);
  return out;
}

std::vector<uint8_t> write_frames(const std::vector<Frame>& frames, DataProtection p) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  std::vector<uint8_t> got;
  std::thread reader([&] {
    uint8_t buf[4096];
    ssize_t r;
    while ((r = ::read(fds[1], buf, sizeof buf)) > 0) got.insert(got.end(), buf, buf + r);
  });
  {
    DataSender s(fds[0], p, keys().dialer_to_acceptor);
    for (const Frame& f : frames) {
      const std::span<const uint8_t> pieces[] = {{f.payload.data(), f.payload.size()}};
      s.send(f.header, pieces);
    }
  }
  ::shutdown(fds[0], SHUT_WR);
  reader.join();
  ::close(fds[0]);
  ::close(fds[1]);
  return got;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const DataProtection p = (data[0] & 1) ? DataProtection::trusted_fabric : DataProtection::sealed;
  bool failed = false;
  if (!(data[0] & 2)) {
    read_frames(std::vector<uint8_t>(data + 1, data + size), p, &failed);
    return 0;
  }
  if (size < 4) return 0;
  std::vector<Frame> frames;
  for (size_t at = 4; at + 2 <= size;) {
    const size_t h = data[at], n = data[at + 1];
    at += 2;
    Frame f;
    for (size_t i = 0; i < h && at < size; ++i) f.header.push_back(data[at++]);
    for (size_t i = 0; i < n && at < size; ++i) f.payload.push_back(data[at++]);
    frames.push_back(std::move(f));
  }
  std::vector<uint8_t> wire = write_frames(frames, p);
  const bool flip = data[1] & 1;
  const size_t where = wire.empty() ? 0 : (static_cast<size_t>(data[2]) << 8 | data[3]) % wire.size();
  if (flip && !wire.empty()) wire[where] ^= 0x01;
  const std::vector<Frame> got = read_frames(wire, p, &failed);
  if (!flip || wire.empty()) {
    if (failed || got != frames) std::abort();  // what was sent must come out
    return 0;
  }
  // Flipped: only frames wholly before the flip may come out, and they as sent.
  if (got.size() > frames.size()) std::abort();
  size_t end = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == frames[i])) std::abort();
    end += 12 + frames[i].header.size() + 16 + frames[i].payload.size() + 16;
  }
  if (end > where) std::abort();
  return 0;
}
