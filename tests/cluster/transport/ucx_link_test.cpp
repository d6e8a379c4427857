// The data plane's frames over UCX between two links of this process (UCX
// picks shared memory or cross-memory attach for them, as for two nodes on
// one machine): what goes in comes out, a damaged frame is refused, and the
// control socket beside the link ends every wait when the peer hangs up.

#include "cluster/transport/ucx_link.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <random>
#include <thread>

#include "cluster/transport/data_channel.hpp"

#ifdef ACTORLM_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace actorlm {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

// Two connected links, as the data plane's handshake leaves them: each has
// the other's worker address, and a socket pair stands for the TCP
// connection each watches.
struct LinkPair {
  int fds[2] = {-1, -1};
  std::unique_ptr<UcxLink> a, b;
  // `ring`: a (the sending end) offers its ring, as a prefill node's link
  // does; b answers after connecting, as the decode node's.
  explicit LinkPair(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000), bool ring = false) {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    a = std::make_unique<UcxLink>(fds[0], timeout, ring);
    b = std::make_unique<UcxLink>(fds[1], timeout);
    b->connect(a->address());
    a->connect(b->address());
  }
  ~LinkPair() {
    a.reset();
    b.reset();
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  // The peer hangs up: its link goes, then its socket.
  void hang_up_a() {
    a.reset();
    ::close(fds[0]);
    fds[0] = -1;
  }
};

const DataKeys keys = derive_data_keys(random_bytes(32, 1), random_bytes(16, 2), random_bytes(16, 3));

}  // namespace

TEST_CASE("UCX starts here", "[ucx_link]") { REQUIRE(ucx_unavailable() == ""); }

TEST_CASE("Data plane frames cross a UCX link whole, sealed and on a trusted fabric", "[ucx_link]") {
  for (const bool ring : {false, true}) {
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(ring, static_cast<int>(p));
    LinkPair links(std::chrono::milliseconds(5000), ring);
    // Two links of one process map each other's memory as two processes of
    // one machine do: the blocks go through the ring, or as messages.
    CHECK(links.a->sends_through_ring() == ring);
    CHECK_FALSE(links.b->sends_through_ring());
    // Payloads around the 1 MiB block both ends cut frames into, and rows
    // of odd sizes, as a pool's are.
    const std::vector<size_t> sizes = {0, 1, 768, (1u << 20) - 1, 1u << 20, (1u << 20) + 1, 5u << 20, 3 * 768 * 1000 + 17};
    std::vector<std::vector<uint8_t>> sent;
    for (size_t i = 0; i < sizes.size(); ++i) sent.push_back(random_bytes(sizes[i], static_cast<uint32_t>(10 + i)));
    std::thread sender([&] {
      DataSender s(*links.a, p, keys.dialer_to_acceptor);
      for (size_t i = 0; i < sent.size(); ++i) {
        const uint8_t header[3] = {static_cast<uint8_t>(i), 7, 9};
        // In pieces of 768 bytes and a remainder, as rows are gathered.
        std::vector<std::span<const uint8_t>> pieces;
        for (size_t at = 0; at < sent[i].size(); at += 768) {
          pieces.emplace_back(sent[i].data() + at, std::min<size_t>(768, sent[i].size() - at));
        }
        s.send(header, pieces);
      }
    });
    DataReceiver r(*links.b, p, keys.dialer_to_acceptor, 64u << 20);
    for (size_t i = 0; i < sent.size(); ++i) {
      std::vector<uint8_t> header;
      uint64_t n = 0;
      REQUIRE(r.next(header, n));
      CHECK(header == std::vector<uint8_t>{static_cast<uint8_t>(i), 7, 9});
      REQUIRE(n == sent[i].size());
      std::vector<uint8_t> got(n);
      const std::span<uint8_t> into[] = {{got.data(), got.size()}};
      r.read_payload(into);
      CHECK(got == sent[i]);
    }
    sender.join();
    // Every payload block read in place: one per started MiB of each frame.
    uint64_t blocks = 0;
    for (size_t n : sizes) blocks += (n + (1u << 20) - 1) >> 20;
    CHECK(links.b->blocks_read_in_place() == (ring ? blocks : 0));
    // The sender hangs up between frames (closing its endpoint flushes it,
    // which this end's waiting serves): a clean end.
    std::thread hang_up([&] { links.hang_up_a(); });
    std::vector<uint8_t> header;
    uint64_t n = 0;
    CHECK_FALSE(r.next(header, n));
    hang_up.join();
  }
  }
}

TEST_CASE("A block damaged in the ring fails its check, and a sender held by a full ring hears the peer hang up",
          "[ucx_link]") {
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(static_cast<int>(p));
    LinkPair links(std::chrono::milliseconds(5000), true);
    REQUIRE(links.a->sends_through_ring());
    const std::vector<uint8_t> data = random_bytes((3u << 20) + 100, 8);
    const std::span<const uint8_t> pieces[] = {{data.data(), data.size()}};
    std::thread sender([&] {
      DataSender s(*links.a, p, keys.dialer_to_acceptor);
      s.damage_next_payload();
      s.send({}, pieces);
      s.send({}, pieces);
    });
    DataReceiver r(*links.b, p, keys.dialer_to_acceptor, 64u << 20);
    std::vector<uint8_t> header, got(data.size());
    const std::span<uint8_t> into[] = {{got.data(), got.size()}};
    uint64_t n = 0;
    REQUIRE(r.next(header, n));
    CHECK_THROWS_WITH(r.read_payload(into),
                      p == DataProtection::sealed ? "a data plane payload fails its tag" : "a data plane payload fails its check");
    sender.join();
  }
  // Ten blocks, of which the ring holds four: the sender waits for the
  // receiver, which reads the header and leaves.
  LinkPair links(std::chrono::milliseconds(5000), true);
  const std::vector<uint8_t> data = random_bytes(10u << 20, 9);
  const std::span<const uint8_t> pieces[] = {{data.data(), data.size()}};
  std::atomic<bool> sent{false};
  std::string sender_error;
  std::thread sender([&] {
    DataSender s(*links.a, DataProtection::sealed, keys.dialer_to_acceptor);
    try {
      s.send({}, pieces);
      sent = true;
    } catch (const DataChannelError& e) {
      sender_error = e.what();
    }
  });
  {
    DataReceiver r(*links.b, DataProtection::sealed, keys.dialer_to_acceptor, 64u << 20);
    std::vector<uint8_t> header;
    uint64_t n = 0;
    REQUIRE(r.next(header, n));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK_FALSE(sent);
  }
  const auto t0 = std::chrono::steady_clock::now();
  links.b.reset();
  ::close(links.fds[1]);
  links.fds[1] = -1;
  sender.join();
  CHECK_FALSE(sent);
  CHECK_THAT(sender_error, Catch::Contains("closed"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
}

TEST_CASE("A malformed UCX link address is refused", "[ucx_link]") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  {
    UcxLink a(fds[0], std::chrono::milliseconds(1000), true);
    const std::vector<uint8_t> good = a.address();
    for (const size_t cut : {size_t{0}, size_t{1}, size_t{5}, good.size() / 2, good.size() - 1}) {
      UcxLink b(fds[1], std::chrono::milliseconds(1000));
      CAPTURE(cut);
      CHECK_THROWS_AS(b.connect(std::span<const uint8_t>(good.data(), cut)), DataChannelError);
    }
    std::vector<uint8_t> other = good;
    other[0] ^= 0xff;  // another version
    UcxLink b(fds[1], std::chrono::milliseconds(1000));
    CHECK_THROWS_WITH(b.connect(other), Catch::Contains("another version"));
    std::vector<uint8_t> longer = good;
    longer.push_back(0);
    UcxLink c(fds[1], std::chrono::milliseconds(1000));
    CHECK_THROWS_WITH(c.connect(longer), Catch::Contains("malformed"));
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("A damaged frame over UCX fails its tag, and so does one under another key", "[ucx_link]") {
  LinkPair links;
  const std::vector<uint8_t> data = random_bytes(3u << 20, 5);
  const std::span<const uint8_t> pieces[] = {{data.data(), data.size()}};
  std::thread sender([&] {
    DataSender s(*links.a, DataProtection::sealed, keys.dialer_to_acceptor);
    s.send({}, pieces);
    s.damage_next_payload();
    s.send({}, pieces);
  });
  DataReceiver r(*links.b, DataProtection::sealed, keys.dialer_to_acceptor, 64u << 20);
  std::vector<uint8_t> header, got(data.size());
  const std::span<uint8_t> into[] = {{got.data(), got.size()}};
  uint64_t n = 0;
  REQUIRE(r.next(header, n));
  r.read_payload(into);
  CHECK(got == data);
  REQUIRE(r.next(header, n));
  CHECK_THROWS_WITH(r.read_payload(into), "a data plane payload fails its tag");
  sender.join();

  LinkPair other;
  std::string sender_error;
  std::thread foreign([&] {
    DataSender s(*other.a, DataProtection::sealed, keys.acceptor_to_dialer);  // the other direction's key
    try {
      s.send({}, pieces);
    } catch (const DataChannelError& e) {
      sender_error = e.what();
    }
  });
  {
    DataReceiver q(*other.b, DataProtection::sealed, keys.dialer_to_acceptor, 64u << 20);
    CHECK_THROWS_WITH(q.next(header, n), "a data plane header fails its tag");
  }
  // The receiver hangs up: the sender, blocked on a payload nobody takes,
  // hears it at once (from the control socket closing, or from UCX itself
  // when its shared memory goes first), well before its 5 s timeout.
  const auto t0 = std::chrono::steady_clock::now();
  other.b.reset();
  ::close(other.fds[1]);
  other.fds[1] = -1;
  foreign.join();
  CHECK_FALSE(sender_error.empty());
  CHECK_THAT(sender_error, !Catch::Contains("timed out"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
}

TEST_CASE("A peer that hangs up inside a frame, or falls silent, ends the wait with an error", "[ucx_link]") {
  {
    LinkPair links;
    const std::vector<uint8_t> part = random_bytes(100, 6);
    links.a->send_all(part.data(), part.size(), "test");  // 100 of the 200 bytes read below
    std::thread hang_up([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      links.hang_up_a();
    });
    std::vector<uint8_t> got(200);
    CHECK_THROWS_WITH(links.b->recv_all(got.data(), got.size(), "test"), Catch::Contains("closed the connection inside a frame"));
    hang_up.join();
    CHECK(std::equal(part.begin(), part.end(), got.begin()));
  }
  {
    LinkPair links(std::chrono::milliseconds(300));
    uint8_t byte = 0;
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(links.b->recv_first(byte), Catch::Contains("timed out"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
  }
  {
    // A cancel shuts this end's socket down: a blocked receive returns.
    LinkPair links;
    std::thread cancel([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::shutdown(links.fds[1], SHUT_RDWR);
    });
    std::vector<uint8_t> got(10);
    CHECK_THROWS(links.b->recv_all(got.data(), got.size(), "test"));
    cancel.join();
  }
}

#ifdef ACTORLM_HAVE_UCX
TEST_CASE("A peer's ring key that covers less than a ring is not read", "[ucx_link]") {
  // A peer of its own: a UCX context and worker, and 64 KiB of shared
  // memory offered as if it were a 4 MiB ring. Reading it as one would fault.
  ucp_config_t* config = nullptr;
  REQUIRE(ucp_config_read(nullptr, nullptr, &config) == UCS_OK);
  ucp_config_modify(config, "TLS", "^tcp");
  ucp_config_modify(config, "ALLOC_PRIO", "md:posix");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
  ucp_context_h ctx = nullptr;
  REQUIRE(ucp_init(&params, config, &ctx) == UCS_OK);
  ucp_config_release(config);
  ucp_worker_params_t wp{};
  ucp_worker_h worker = nullptr;
  REQUIRE(ucp_worker_create(ctx, &wp, &worker) == UCS_OK);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.length = 64u << 10;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h mem = nullptr;
  REQUIRE(ucp_mem_map(ctx, &mp, &mem) == UCS_OK);
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
  REQUIRE(ucp_mem_query(mem, &attr) == UCS_OK);
  void* key = nullptr;
  size_t key_bytes = 0;
  REQUIRE(ucp_rkey_pack(ctx, mem, &key, &key_bytes) == UCS_OK);
  ucp_address_t* a = nullptr;
  size_t a_bytes = 0;
  REQUIRE(ucp_worker_get_address(worker, &a, &a_bytes) == UCS_OK);
  // The link address format (ucx_link.cpp): version, flags (offers a ring),
  // the worker's address, the ring's base and key.
  std::vector<uint8_t> address = {1, 1};
  auto put = [&](const void* p, size_t n) {
    address.insert(address.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  const auto a_len = static_cast<uint32_t>(a_bytes);
  put(&a_len, 4);
  put(a, a_bytes);
  const auto base = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(attr.address));
  put(&base, 8);
  const auto key_len = static_cast<uint32_t>(key_bytes);
  put(&key_len, 4);
  put(key, key_bytes);
  ucp_rkey_buffer_release(key);
  ucp_worker_release_address(worker, a);
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  {
    UcxLink b(fds[1], std::chrono::milliseconds(1000));
    b.connect(address);
    // b maps the key but finds less than a ring there: it does not say it
    // reads the peer's ring, so the peer would send its blocks.
    const std::vector<uint8_t> answer = b.address();
    REQUIRE(answer.size() > 2);
    CHECK((answer[1] & 2) == 0);
  }
  // The same check passes for a whole ring: the flag is what the real
  // sending end's link sees.
  {
    UcxLink a_link(fds[0], std::chrono::milliseconds(1000), true);
    UcxLink b(fds[1], std::chrono::milliseconds(1000));
    b.connect(a_link.address());
    CHECK((b.address()[1] & 2) == 2);
  }
  ::close(fds[0]);
  ::close(fds[1]);
  ucp_mem_unmap(ctx, mem);
  ucp_worker_destroy(worker);
  ucp_cleanup(ctx);
}
#endif

}  // namespace actorlm
