// The data plane's frames over real sockets: what goes in comes out, sealed
// or on a trusted fabric, and a wrong key, a flipped byte, a replayed or
// reflected frame, a lying length or a cut stream is refused.

#include "cluster/transport/data_channel.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <random>
#include <thread>

namespace actorlm {
namespace {

struct SocketPair {
  int a = -1, b = -1;
  SocketPair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    a = fds[0];
    b = fds[1];
  }
  ~SocketPair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
  void close_a() {
    ::close(a);
    a = -1;
  }
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

DataKeys test_keys(uint8_t salt = 0) {
  return derive_data_keys(random_bytes(32, 7 + salt), random_bytes(16, 8), random_bytes(16, 9));
}

// Whatever `send` writes to a socket, as bytes (read on another thread, so
// frames larger than the socket's buffer do not block).
std::vector<uint8_t> capture(DataProtection p, const DataKey& key, const std::function<void(DataSender&)>& send) {
  SocketPair s;
  std::vector<uint8_t> got;
  std::thread reader([&] {
    uint8_t buf[65536];
    ssize_t r;
    while ((r = ::read(s.b, buf, sizeof buf)) > 0) got.insert(got.end(), buf, buf + r);
  });
  {
    DataSender sender(s.a, p, key);
    send(sender);
  }
  s.close_a();
  reader.join();
  return got;
}

// A receiver reading exactly `bytes` (written on another thread).
struct Feed {
  SocketPair s;
  std::thread writer;
  explicit Feed(std::vector<uint8_t> bytes) {
    writer = std::thread([this, bytes = std::move(bytes)] {
      size_t at = 0;
      while (at < bytes.size()) {
        const ssize_t w = ::send(s.a, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
        if (w <= 0) break;
        at += static_cast<size_t>(w);
      }
      ::shutdown(s.a, SHUT_WR);
    });
  }
  ~Feed() {
    ::shutdown(s.b, SHUT_RDWR);
    writer.join();
  }
};

// Reads every frame of `bytes`: the headers and payloads, or the first error.
struct Read {
  std::vector<std::vector<uint8_t>> headers, payloads;
  std::string error;
};
Read read_all(std::vector<uint8_t> bytes, DataProtection p, const DataKey& key, uint64_t max_payload = 1ull << 30) {
  Feed feed(std::move(bytes));
  DataReceiver r(feed.s.b, p, key, max_payload);
  Read out;
  try {
    std::vector<uint8_t> header;
    uint64_t n = 0;
    while (r.next(header, n)) {
      std::vector<uint8_t> payload(n);
      // Scattered over three uneven parts.
      const size_t cut1 = n / 3, cut2 = n - n / 5;
      std::vector<std::span<uint8_t>> into{{payload.data(), cut1},
                                           {payload.data() + cut1, cut2 - cut1},
                                           {payload.data() + cut2, n - cut2}};
      r.read_payload(into);
      out.headers.push_back(header);
      out.payloads.push_back(std::move(payload));
    }
  } catch (const DataChannelError& e) {
    out.error = e.what();
  }
  return out;
}

// Two frames: a small one, and one of 3 MiB gathered from many pieces.
std::vector<uint8_t> two_frames(DataProtection p, const DataKey& key, const std::vector<uint8_t>& big) {
  return capture(p, key, [&](DataSender& s) {
    const std::vector<uint8_t> h1{1, 2, 3}, d1{9, 8, 7, 6};
    const std::vector<std::span<const uint8_t>> p1{d1};
    s.send(h1, p1);
    std::vector<std::span<const uint8_t>> pieces;
    for (size_t at = 0; at < big.size(); at += 1536) pieces.emplace_back(big.data() + at, std::min<size_t>(1536, big.size() - at));
    const std::vector<uint8_t> h2(200, 0x55);
    s.send(h2, pieces);
  });
}

}  // namespace

TEST_CASE("Data plane frames arrive whole, sealed and on a trusted fabric", "[data_channel]") {
  const DataKeys keys = test_keys();
  const std::vector<uint8_t> big = random_bytes(3u << 20, 1);
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(static_cast<int>(p));
    const std::vector<uint8_t> wire = two_frames(p, keys.dialer_to_acceptor, big);
    const Read got = read_all(wire, p, keys.dialer_to_acceptor);
    REQUIRE(got.error.empty());
    REQUIRE(got.headers.size() == 2);
    CHECK(got.headers[0] == std::vector<uint8_t>{1, 2, 3});
    CHECK(got.payloads[0] == std::vector<uint8_t>{9, 8, 7, 6});
    CHECK(got.headers[1] == std::vector<uint8_t>(200, 0x55));
    CHECK(got.payloads[1] == big);
    // Sealed, the payload's bytes are not on the wire in the clear.
    const auto at = std::search(wire.begin(), wire.end(), big.begin(), big.begin() + 64);
    CHECK((at != wire.end()) == (p == DataProtection::trusted_fabric));
  }
}

TEST_CASE("A data plane frame under another key, or sent back the other way, is refused", "[data_channel]") {
  const DataKeys keys = test_keys(), other = test_keys(1);
  CHECK(keys.dialer_to_acceptor != keys.acceptor_to_dialer);
  CHECK(keys.dialer_to_acceptor != other.dialer_to_acceptor);
  const std::vector<uint8_t> wire = two_frames(DataProtection::sealed, keys.dialer_to_acceptor, random_bytes(1000, 2));
  CHECK(read_all(wire, DataProtection::sealed, other.dialer_to_acceptor).error == "a data plane header fails its tag");
  // A frame reflected back to its sender opens under the other direction's key: refused.
  CHECK(read_all(wire, DataProtection::sealed, keys.acceptor_to_dialer).error == "a data plane header fails its tag");
  // A sealed stream is no trusted-fabric stream either.
  CHECK(!read_all(wire, DataProtection::trusted_fabric, keys.dialer_to_acceptor).error.empty());
}

TEST_CASE("Every flipped byte of a data plane frame is caught", "[data_channel]") {
  const DataKeys keys = test_keys();
  const std::vector<uint8_t> payload = random_bytes(5000, 3);
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(static_cast<int>(p));
    const std::vector<uint8_t> wire = capture(p, keys.dialer_to_acceptor, [&](DataSender& s) {
      const std::vector<uint8_t> h{4, 5, 6, 7};
      const std::vector<std::span<const uint8_t>> pieces{payload};
      s.send(h, pieces);
    });
    REQUIRE(read_all(wire, p, keys.dialer_to_acceptor).error.empty());
    // Prefix, header, header tag, the payload's first and last bytes, its tag.
    for (size_t at : {size_t(0), size_t(5), size_t(12), size_t(17), size_t(32), size_t(33), wire.size() / 2,
                      wire.size() - 17, wire.size() - 1}) {
      CAPTURE(at);
      std::vector<uint8_t> bad = wire;
      bad[at] ^= 0x20;
      const Read got = read_all(bad, p, keys.dialer_to_acceptor, 1 << 20);
      CHECK(!got.error.empty());
      CHECK(got.payloads.empty());
    }
  }
}

TEST_CASE("A flipped byte anywhere in a payload of several blocks is caught", "[data_channel]") {
  // 3 MiB, three of the channel's 1 MiB blocks, received into read_all's
  // three long parts: sealed, each part is opened straight into it.
  const DataKeys keys = test_keys();
  const std::vector<uint8_t> payload = random_bytes(3u << 20, 5);
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(static_cast<int>(p));
    const std::vector<uint8_t> wire = capture(p, keys.dialer_to_acceptor, [&](DataSender& s) {
      const std::vector<std::span<const uint8_t>> pieces{payload};
      s.send({}, pieces);
    });
    const Read clean = read_all(wire, p, keys.dialer_to_acceptor, 4u << 20);
    REQUIRE(clean.error.empty());
    REQUIRE(clean.payloads.size() == 1);
    CHECK(clean.payloads[0] == payload);
    const size_t payload_at = 12 + 16;  // after the prefix and the empty header's tag
    for (size_t at : {size_t(0), size_t(1u << 19), size_t((1u << 20) - 1), size_t((3u << 19) + 7), payload.size() - 1}) {
      CAPTURE(at);
      std::vector<uint8_t> bad = wire;
      bad[payload_at + at] ^= 0x04;
      const Read got = read_all(bad, p, keys.dialer_to_acceptor, 4u << 20);
      CHECK(!got.error.empty());
      CHECK(got.payloads.empty());
    }
  }
}

TEST_CASE("A replayed, dropped or reordered data plane frame fails its tag", "[data_channel]") {
  const DataKeys keys = test_keys();
  const DataKey& k = keys.dialer_to_acceptor;
  const std::vector<uint8_t> wire = capture(DataProtection::sealed, k, [&](DataSender& s) {
    for (uint8_t i = 0; i < 3; ++i) {
      const std::vector<uint8_t> h{i}, d(100, i);
      const std::vector<std::span<const uint8_t>> pieces{d};
      s.send(h, pieces);
    }
  });
  REQUIRE(read_all(wire, DataProtection::sealed, k).headers.size() == 3);
  const size_t frame = wire.size() / 3;  // all three are the same size
  auto part = [&](size_t i) { return std::vector<uint8_t>(wire.begin() + i * frame, wire.begin() + (i + 1) * frame); };
  auto join = [](std::vector<std::vector<uint8_t>> parts) {
    std::vector<uint8_t> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const Read replayed = read_all(join({part(0), part(0)}), DataProtection::sealed, k);
  CHECK(replayed.headers.size() == 1);
  CHECK(replayed.error == "a data plane header fails its tag");
  const Read dropped = read_all(join({part(0), part(2)}), DataProtection::sealed, k);
  CHECK(dropped.headers.size() == 1);
  CHECK(dropped.error == "a data plane header fails its tag");
  CHECK(read_all(join({part(1), part(0)}), DataProtection::sealed, k).headers.empty());
}

TEST_CASE("A data plane payload over the bound, or a cut stream, is refused", "[data_channel]") {
  const DataKeys keys = test_keys();
  const DataKey& k = keys.dialer_to_acceptor;
  const std::vector<uint8_t> wire = two_frames(DataProtection::sealed, k, random_bytes(10000, 4));
  // The second frame's 10,000 bytes are over a 5,000-byte bound.
  const Read bounded = read_all(wire, DataProtection::sealed, k, 5000);
  CHECK(bounded.headers.size() == 1);
  CHECK(bounded.error == "a data plane payload over the receiver's bound");
  for (size_t cut : {size_t(1), size_t(11), size_t(40), wire.size() - 1}) {
    CAPTURE(cut);
    const Read got = read_all(std::vector<uint8_t>(wire.begin(), wire.begin() + static_cast<long>(cut)),
                              DataProtection::sealed, k);
    CHECK(got.error.find("closed the connection inside a frame") != std::string::npos);
  }
  // Nothing at all: a clean close.
  CHECK(read_all({}, DataProtection::sealed, k).error.empty());
}

TEST_CASE("A data plane payload can be skipped, still verified, and must match its destination", "[data_channel]") {
  const DataKeys keys = test_keys();
  const DataKey& k = keys.dialer_to_acceptor;
  const std::vector<uint8_t> wire = two_frames(DataProtection::sealed, k, random_bytes(3u << 20, 5));
  Feed feed(wire);
  DataReceiver r(feed.s.b, DataProtection::sealed, k, 1ull << 30);
  std::vector<uint8_t> header;
  uint64_t n = 0;
  REQUIRE(r.next(header, n));
  std::vector<uint8_t> small(n + 1);
  const std::vector<std::span<uint8_t>> wrong{{small.data(), small.size()}};
  CHECK_THROWS_AS(r.read_payload(wrong), DataChannelError);
  r.skip_payload();
  REQUIRE(r.next(header, n));
  CHECK(n == (3u << 20));
  r.skip_payload();
  CHECK(!r.next(header, n));
}

TEST_CASE("Data plane frames cross a TCP connection on loopback", "[data_channel]") {
  const DataKeys keys = test_keys();
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::vector<uint8_t> big = random_bytes(8u << 20, 6);
  std::string dial_error;  // Catch2's assertions are not for other threads
  std::thread dialer([&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    try {
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw DataChannelError("connect failed");
      DataSender s(fd, DataProtection::sealed, keys.dialer_to_acceptor);
      const std::vector<uint8_t> h{42};
      const std::vector<std::span<const uint8_t>> pieces{big};
      for (int i = 0; i < 3; ++i) s.send(h, pieces);
    } catch (const DataChannelError& e) {
      dial_error = e.what();
    }
    ::close(fd);
  });
  const int fd = ::accept(listener, nullptr, nullptr);
  REQUIRE(fd >= 0);
  DataReceiver r(fd, DataProtection::sealed, keys.dialer_to_acceptor, 16u << 20);
  std::vector<uint8_t> header, got(big.size());
  uint64_t n = 0;
  int frames = 0;
  while (r.next(header, n)) {
    REQUIRE(n == big.size());
    const std::vector<std::span<uint8_t>> into{{got.data(), got.size()}};
    r.read_payload(into);
    CHECK(got == big);
    ++frames;
  }
  dialer.join();
  ::close(fd);
  ::close(listener);
  CHECK(dial_error.empty());
  CHECK(frames == 3);
}

}  // namespace actorlm

namespace actorlm {
namespace {

// `n` bytes cut into pieces of random lengths: empty ones, short ones
// (gathered before the cipher runs) and long ones (sealed or opened
// straight from or into the rows), some across the 1 MiB block boundaries.
template <class Span, class Byte>
std::vector<Span> random_cuts(Byte* data, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Span> out;
  for (size_t at = 0; at < n;) {
    // Empty, short, long, up to a few of the channel's 1 MiB blocks, middling.
    const uint32_t kind = rng() % 5;
    size_t len = kind == 0   ? 0
                 : kind == 1 ? 1 + rng() % 2000
                 : kind == 2 ? (16u << 10) + rng() % 300000
                 : kind == 3 ? 1 + rng() % (3u << 20)
                             : 1 + rng() % (16u << 10);
    len = std::min(len, n - at);
    out.emplace_back(data + at, len);
    at += len;
  }
  return out;
}

}  // namespace

TEST_CASE("However sender and receiver cut a payload into rows, the same bytes cross, and sealed the same wire", "[data_channel]") {
  const DataKeys keys = test_keys();
  const std::vector<uint8_t> data = random_bytes((3u << 20) + 12345, 4);
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(static_cast<int>(p));
    // One piece: the reference wire.
    const std::vector<uint8_t> whole = capture(p, keys.dialer_to_acceptor, [&](DataSender& s) {
      const std::span<const uint8_t> one[] = {{data.data(), data.size()}};
      s.send({}, one);
    });
    for (uint32_t seed = 1; seed <= 12; ++seed) {
      CAPTURE(seed);
      const std::vector<uint8_t> cut = capture(p, keys.dialer_to_acceptor, [&](DataSender& s) {
        const auto pieces = random_cuts<std::span<const uint8_t>>(data.data(), data.size(), seed);
        s.send({}, pieces);
      });
      CHECK(cut == whole);
      Feed feed(cut);
      DataReceiver r(feed.s.b, p, keys.dialer_to_acceptor, 1ull << 30);
      std::vector<uint8_t> header;
      uint64_t n = 0;
      REQUIRE(r.next(header, n));
      REQUIRE(n == data.size());
      std::vector<uint8_t> got(n);
      const auto into = random_cuts<std::span<uint8_t>>(got.data(), got.size(), seed + 100);
      r.read_payload(into);
      CHECK(got == data);
    }
  }
}

}  // namespace actorlm
