// A decode node's data port and a prefill node's transfer over it, in one
// process over loopback TCP, with stand-in workers whose pools are plain
// maps: every row arrives in its reserved row, and a stranger, a node with
// the other protection, a ticket never issued or a damaged frame is refused
// with the request failed at the gateway.

#include "cluster/transfer/kv_data_plane.hpp"
#include "cluster/transport/ucx_link.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "actors/wire.hpp"
#include "cluster/transport/cluster_atoms.hpp"

namespace actorlm {
namespace {

constexpr int32_t kLayers = 3;
constexpr int64_t kTokenBytes = 64;

const KvLayout kLayout{"test-model", "f32", kLayers, kTokenBytes};

uint8_t byte_of(int32_t layer, int32_t row, int64_t i) { return static_cast<uint8_t>(layer * 31 + row * 7 + i); }

// What a stand-in worker holds: one token's bytes per (layer, row).
struct Pool {
  std::mutex gate;  // held by a test: writes wait for it
  std::mutex mu;
  std::map<std::pair<int32_t, int32_t>, std::vector<uint8_t>> rows;
};

// Reads rows it invents (byte_of) and writes into `pool`, in the layout the
// real worker uses for a range: layer by layer, row by row.
caf::behavior stand_in_worker(caf::event_based_actor*, std::shared_ptr<Pool> pool) {
  return {
      [](kv_read_raw_atom, const std::vector<int32_t>& rows, int32_t first, int32_t last) {
        std::vector<uint8_t> out;
        for (int32_t l = first; l < last; ++l) {
          for (int32_t r : rows) {
            for (int64_t i = 0; i < kTokenBytes; ++i) out.push_back(byte_of(l, r, i));
          }
        }
        return out;
      },
      [pool](kv_write_raw_atom, const std::vector<int32_t>& rows, int32_t first, int32_t last,
             const std::vector<uint8_t>& data) -> std::string {
        if (data.size() != rows.size() * static_cast<size_t>(last - first) * kTokenBytes) return "wrong size";
        std::lock_guard<std::mutex> wait(pool->gate);
        std::lock_guard<std::mutex> lock(pool->mu);
        size_t at = 0;
        for (int32_t l = first; l < last; ++l) {
          for (int32_t r : rows) {
            pool->rows[{l, r}].assign(data.begin() + static_cast<long>(at), data.begin() + static_cast<long>(at + kTokenBytes));
            at += kTokenBytes;
          }
        }
        return "";
      },
  };
}

// A pool in this process's memory, as the CPU backend's is: one token's
// bytes per (layer, row), handed out in place (KvRowSpans).
struct FlatPool {
  static constexpr int32_t kRows = 1024;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(static_cast<size_t>(kLayers) * kRows * kTokenBytes);
  uint8_t* row(int32_t layer, int32_t r) { return bytes.data() + (static_cast<size_t>(layer) * kRows + r) * kTokenBytes; }
  // The prefill side of Fixture::transfer(): rows 100..139 of every layer, each byte byte_of().
  void fill_transfer_rows() {
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int32_t r = 100; r < 140; ++r) {
        for (int64_t i = 0; i < kTokenBytes; ++i) row(l, r)[i] = byte_of(l, r, i);
      }
    }
  }
  KvRowSpans spans() {
    return [this](std::span<const int32_t> rows, int32_t first, int32_t last, std::vector<std::span<uint8_t>>& out) {
      out.clear();
      for (int32_t l = first; l < last; ++l) {
        for (int32_t r : rows) out.emplace_back(row(l, r), kTokenBytes);
      }
      return true;
    };
  }
};

struct Failures {
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::string>> got;
  std::vector<uint64_t> landed;  // kv_landed: requests whose fence opened
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return got.size();
  }
  std::vector<uint64_t> fences_opened() {
    std::lock_guard<std::mutex> lock(mu);
    return landed;
  }
};

caf::behavior stand_in_gateway(caf::event_based_actor*, std::shared_ptr<Failures> f) {
  return {[f](kv_data_failed_atom, uint64_t id, const std::string& why) {
            std::lock_guard<std::mutex> lock(f->mu);
            f->got.emplace_back(id, why);
          },
          [f](kv_landed_atom, uint64_t id) {
            std::lock_guard<std::mutex> lock(f->mu);
            f->landed.push_back(id);
          }};
}

template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 250; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

struct Fixture {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  std::shared_ptr<Pool> decode_pool = std::make_shared<Pool>();
  std::shared_ptr<Failures> failures = std::make_shared<Failures>();
  std::shared_ptr<KvReceiver> receiver = std::make_shared<KvReceiver>(kLayout);
  std::shared_ptr<DataSessions> sessions = std::make_shared<DataSessions>();
  std::vector<uint8_t> key = std::vector<uint8_t>(32, 0x42);
  caf::actor prefill_worker = system.spawn(stand_in_worker, std::make_shared<Pool>());
  caf::actor decode_worker = system.spawn(stand_in_worker, decode_pool);
  caf::actor gateway = system.spawn(stand_in_gateway, failures);
  FlatPool decode_flat;
  std::unique_ptr<KvDataServer> server;

  DataTransport transport;
  explicit Fixture(DataProtection protection = DataProtection::sealed, bool in_place = false,
                   DataTransport t = DataTransport::socket, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                   std::chrono::milliseconds kept_idle = kDataPortKeptIdle)
      : transport(t) {
    sessions->add(key);
    KvDataServerConfig c;
    c.protection = protection;
    c.transport = t;
    c.worker = decode_worker;
    if (in_place) c.spans = decode_flat.spans();
    c.receiver = receiver;
    c.sessions = sessions;
    c.gateway = gateway;
    c.timeout = timeout;
    c.kept_idle = kept_idle;
    server = std::make_unique<KvDataServer>(system, c);
  }
  ~Fixture() {
    server.reset();
    for (auto* a : {&prefill_worker, &decode_worker, &gateway}) caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
  }

  // 40 tokens: prefill rows 100.., reserved decode rows 500.. (request 77).
  KvDataSend transfer(uint64_t ticket) {
    KvDataSend s;
    s.ticket = ticket;
    for (int32_t t = 0; t < 40; ++t) s.rows.push_back(100 + t);
    s.plan = plan_kv_chunks(40, kLayout, 40 * kTokenBytes);  // a chunk per layer
    s.worker = prefill_worker;
    s.timeout = std::chrono::milliseconds(5000);
    return s;
  }
  uint64_t reserve() {
    std::vector<int32_t> rows;
    for (int32_t t = 0; t < 40; ++t) rows.push_back(500 + t);
    return receiver->open(77, rows);
  }
  KvDataTarget target(DataProtection protection = DataProtection::sealed) const {
    return {"127.0.0.1", server->port(), key, protection, transport};
  }
  size_t rows_written() {
    std::lock_guard<std::mutex> lock(decode_pool->mu);
    return decode_pool->rows.size();
  }
};

}  // namespace

TEST_CASE("A transfer over the data plane fills exactly the reserved rows", "[kv_data_plane]") {
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(static_cast<int>(p));
    Fixture f(p);
    const uint64_t ticket = f.reserve();
    const KvDataResult r = send_kv_over_data_plane(f.system, f.target(p), f.transfer(ticket));
    REQUIRE(r.error.empty());
    CHECK(r.bytes == 40 * kLayers * kTokenBytes);
    CHECK(f.server->chunks() == kLayers);
    // Prefill row 100 + t went to decode row 500 + t, every layer, every byte.
    REQUIRE(f.rows_written() == 40 * kLayers);
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int32_t t = 0; t < 40; ++t) {
        const auto& got = f.decode_pool->rows.at({l, 500 + t});
        for (int64_t i = 0; i < kTokenBytes; ++i) REQUIRE(got[static_cast<size_t>(i)] == byte_of(l, 100 + t, i));
      }
    }
    const KvReceiver::Committed c = f.receiver->commit(ticket);
    CHECK(c.error.empty());
    CHECK(c.request_id == 77);
    CHECK(f.failures->size() == 0);
  }
}

TEST_CASE("In place, a transfer gathers from the prefill pool and scatters into the reserved rows, through neither worker", "[kv_data_plane]") {
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(static_cast<int>(p));
    Fixture f(p, true);
    FlatPool prefill;
    prefill.fill_transfer_rows();
    const uint64_t ticket = f.reserve();
    KvDataSend s = f.transfer(ticket);
    s.worker = caf::actor{};  // used, it would fail the transfer
    s.spans = prefill.spans();
    const KvDataResult r = send_kv_over_data_plane(f.system, f.target(p), s);
    REQUIRE(r.error.empty());
    CHECK(r.bytes == 40 * kLayers * kTokenBytes);
    CHECK(f.rows_written() == 0);  // nothing went through the decode node's worker
    // Every write landed (and, through the receiver's lock, the rows are
    // this thread's to read: the socket's order is not one ThreadSanitizer sees).
    CHECK(f.receiver->writes_in_flight() == 0);
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int32_t t = 0; t < 40; ++t) {
        REQUIRE(std::memcmp(f.decode_flat.row(l, 500 + t), prefill.row(l, 100 + t), kTokenBytes) == 0);
      }
    }
    // Nothing outside the reserved rows was touched.
    CHECK(std::all_of(f.decode_flat.row(0, 0), f.decode_flat.row(0, 500), [](uint8_t b) { return b == 0; }));
    const KvReceiver::Committed c = f.receiver->commit(ticket);
    CHECK(c.error.empty());
    CHECK(c.request_id == 77);
    CHECK(f.failures->size() == 0);
  }
}

// A transfer whose rows come through its feed (KvDataFeed), read in place
// from `prefill`: the rows it would have had go to `all`, for the test to
// feed.
KvDataSend fed_transfer(Fixture& f, uint64_t ticket, FlatPool& prefill, std::vector<int32_t>& all) {
  KvDataSend s = f.transfer(ticket);
  all = std::move(s.rows);
  s.rows.clear();
  s.plan.clear();
  s.worker = caf::actor{};
  s.spans = prefill.spans();
  s.feed = std::make_shared<KvDataFeed>();
  s.tokens = static_cast<int32_t>(all.size());
  return s;
}

TEST_CASE("A fed transfer sends rows as they are computed, stays alive while it waits, and fills the reserved rows exactly",
          "[kv_data_plane]") {
  // The decode node gives up on a peer silent for 400 ms; the prompt's
  // next rows come a second apart: only the keepalives hold the connection.
  for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
    CAPTURE(static_cast<int>(p));
    Fixture f(p, true, DataTransport::socket, std::chrono::milliseconds(400));
    FlatPool prefill;
    prefill.fill_transfer_rows();
    const uint64_t ticket = f.reserve();
    std::vector<int32_t> all;
    KvDataSend s = fed_transfer(f, ticket, prefill, all);
    s.timeout = std::chrono::milliseconds(400);
    size_t planned = 0, early = 0;
    auto piece = [&](int32_t from, int32_t to) {
      const std::vector<KvChunkRange> chunks = plan_kv_chunks(from, to, kLayout, 40 * kTokenBytes);
      planned += chunks.size();
      if (to < 40) early += chunks.size();
      s.feed->add(std::span(all).subspan(static_cast<size_t>(from), static_cast<size_t>(to - from)), chunks,
                  std::vector<uint64_t>(chunks.size(), 0), to == 40);
    };
    piece(0, 16);
    std::thread computing([&] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      piece(16, 32);
      std::this_thread::sleep_for(std::chrono::seconds(1));
      piece(32, 40);
    });
    const KvDataResult r = send_kv_over_data_plane(f.system, f.target(p), s);
    computing.join();
    REQUIRE(r.error.empty());
    CHECK(r.bytes == 40 * kLayers * kTokenBytes);
    CHECK(r.chunks == static_cast<int64_t>(planned));
    CHECK(r.early_chunks == static_cast<int64_t>(early));  // the first two pieces went before the last rows came
    CHECK(f.receiver->writes_in_flight() == 0);
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int32_t t = 0; t < 40; ++t) {
        REQUIRE(std::memcmp(f.decode_flat.row(l, 500 + t), prefill.row(l, 100 + t), kTokenBytes) == 0);
      }
    }
    CHECK(f.receiver->commit(ticket).error.empty());
    CHECK(f.failures->size() == 0);
  }
}

TEST_CASE("A fed chunk of a step in progress goes once the step has stored its layers, not before", "[kv_data_plane]") {
  // The prefill pool's rows hold stale bytes until a stand-in step writes
  // them layer by layer, telling the clock after each; a chunk read before
  // its layer was written would carry the stale bytes to the decode node.
  Fixture f(DataProtection::sealed, true);
  FlatPool prefill;
  std::fill(prefill.bytes.begin(), prefill.bytes.end(), uint8_t{0xEE});
  const uint64_t ticket = f.reserve();
  std::vector<int32_t> all;
  KvDataSend s = fed_transfer(f, ticket, prefill, all);
  s.clock = std::make_shared<KvLayerClock>();
  // One chunk per layer of the 40 rows, all written by step 7.
  const std::vector<KvChunkRange> chunks = plan_kv_chunks(0, 40, kLayout, 40 * kTokenBytes);
  REQUIRE(chunks.size() == static_cast<size_t>(kLayers));
  s.clock->end(6);
  s.feed->add(all, chunks, std::vector<uint64_t>(chunks.size(), 7), true);
  std::atomic<int32_t> written{0};
  std::atomic<bool> step_over{false};
  std::promise<void> sent;
  std::thread step([&, sent_now = sent.get_future()] {
    s.clock->begin(7);
    for (int32_t l = 0; l < kLayers; ++l) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      for (int32_t r = 100; r < 140; ++r) {
        for (int64_t i = 0; i < kTokenBytes; ++i) prefill.row(l, r)[i] = byte_of(l, r, i);
      }
      written = l + 1;
      s.clock->stored(l + 1);
    }
    // The step goes on (sampling, other requests' rows) after its last
    // store: here until the transfer is over (or 10 s).
    sent_now.wait_for(std::chrono::seconds(10));
    step_over = true;
    s.clock->end(7);
  });
  const KvDataResult r = send_kv_over_data_plane(f.system, f.target(), s);
  const bool sent_before_step_ended = !step_over;
  sent.set_value();
  step.join();
  REQUIRE(r.error.empty());
  CHECK(r.chunks == kLayers);
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t t = 0; t < 40; ++t) {
      REQUIRE(std::memcmp(f.decode_flat.row(l, 500 + t), prefill.row(l, 100 + t), kTokenBytes) == 0);
    }
  }
  CHECK(f.receiver->commit(ticket).error.empty());
  // Every layer went as it was stored: the transfer ended before the step did.
  CHECK(sent_before_step_ended);
  CHECK(written == kLayers);
  CHECK(s.clock->layers_reported() == kLayers);
}

TEST_CASE("A fed transfer waiting for rows ends at once when stopped, and the reservation stays incomplete", "[kv_data_plane]") {
  Fixture f(DataProtection::sealed, true);
  FlatPool prefill;
  prefill.fill_transfer_rows();
  const uint64_t ticket = f.reserve();
  KvDataSend s = f.transfer(ticket);
  s.worker = caf::actor{};
  s.spans = prefill.spans();
  s.feed = std::make_shared<KvDataFeed>();
  s.tokens = 40;
  std::vector<KvChunkRange> first = plan_kv_chunks(8, kLayout, 40 * kTokenBytes);
  s.feed->add(std::span(s.rows).first(8), first, std::vector<uint64_t>(first.size(), 0), false);
  s.rows.clear();
  s.plan.clear();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    s.feed->stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  const KvDataResult r = send_kv_over_data_plane(f.system, f.target(), s);
  stopper.join();
  CHECK(r.error == "cancelled");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));  // not the 5 s timeout
  CHECK(r.chunks == static_cast<int64_t>(first.size()));
  CHECK(f.receiver->commit(ticket).error.find("still missing") != std::string::npos);
}

TEST_CASE("The data port refuses a stranger and a node with the other protection", "[kv_data_plane]") {
  Fixture f;
  const uint64_t ticket = f.reserve();
  KvDataTarget stranger = f.target();
  stranger.session_key = std::vector<uint8_t>(32, 0x17);  // a session this node does not hold
  const KvDataResult a = send_kv_over_data_plane(f.system, stranger, f.transfer(ticket));
  CHECK(!a.error.empty());
  const KvDataResult b = send_kv_over_data_plane(f.system, f.target(DataProtection::trusted_fabric), f.transfer(ticket));
  CHECK(!b.error.empty());
  CHECK(f.rows_written() == 0);
  // Nothing was taken for the ticket: its transfer is still whole to do.
  CHECK(f.receiver->commit(ticket).error.find("still missing") != std::string::npos);
  // The session goes when its head leaves.
  f.sessions->remove(DataSessions::id_of(f.key));
  const uint64_t again = f.reserve();
  CHECK(!send_kv_over_data_plane(f.system, f.target(), f.transfer(again)).error.empty());
  CHECK(f.rows_written() == 0);
}

TEST_CASE("A ticket never issued, or a damaged frame, fails the transfer and its request", "[kv_data_plane]") {
  Fixture f;
  const KvDataResult unknown = send_kv_over_data_plane(f.system, f.target(), f.transfer(12345));
  CHECK(unknown.error.find("did not issue") != std::string::npos);
  CHECK(f.rows_written() == 0);

  const uint64_t ticket = f.reserve();
  KvDataSend damaged = f.transfer(ticket);
  damaged.corrupt_chunk = 1;
  const KvDataResult r = send_kv_over_data_plane(f.system, f.target(), damaged);
  CHECK(!r.error.empty());
  // The gateway hears which request to fail, and why.
  for (int i = 0; i < 100 && f.failures->size() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(f.failures->size() == 1);
  CHECK(f.failures->got[0].first == 77);
  CHECK(f.failures->got[0].second == "a data plane payload fails its tag");
  // Only the chunk before the damaged one was written.
  CHECK(f.rows_written() == 40);
}

TEST_CASE("A flood of idle connections costs the data port no more than 64 threads, and ends", "[kv_data_plane]") {
  Fixture f;
  auto connect = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(f.server->port());
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
  };
  // Closed by the port within `ms` (a read sees the end), or not.
  auto closed_within = [](int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    char c;
    return ::recv(fd, &c, 1, 0) <= 0;
  };
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) idle.push_back(connect());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // all accepted
  const int extra = connect();
  CHECK(closed_within(extra, 2000));
  ::close(extra);
  // The idle ones never prove a session: each is dropped after 5 s.
  for (int fd : idle) {
    CHECK(closed_within(fd, 8000));
    ::close(fd);
  }
  const uint64_t ticket = f.reserve();
  CHECK(send_kv_over_data_plane(f.system, f.target(), f.transfer(ticket)).error.empty());
}

TEST_CASE("A transfer in progress can be cancelled from another thread", "[kv_data_plane]") {
  Fixture f;
  const uint64_t ticket = f.reserve();
  KvDataSend s = f.transfer(ticket);
  s.cancel = std::make_shared<KvDataCancel>();
  s.cancel->cancel();  // before it starts: it ends at once
  const KvDataResult r = send_kv_over_data_plane(f.system, f.target(), s);
  CHECK(!r.error.empty());
  CHECK(f.rows_written() == 0);
}

TEST_CASE("A request dropped while its chunk is on the way is aborted only once that write is queued", "[kv_data_plane]") {
  // Were the abort sent at once, the scheduler would free the rows while the
  // write of an admitted chunk is still coming, and it would land in rows
  // another request owns by then.
  Fixture f;
  const uint64_t ticket = f.reserve();
  std::unique_lock<std::mutex> hold(f.decode_pool->gate);  // the first write waits
  KvDataResult r;
  std::thread sender([&] { r = send_kv_over_data_plane(f.system, f.target(), f.transfer(ticket)); });
  REQUIRE(eventually([&] { return f.receiver->writes_in_flight() == 1; }));
  // The request is being aborted: its transfer closes, but not yet its fence.
  CHECK_FALSE(f.receiver->drop_request(77));
  CHECK(f.receiver->open_transfers() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(f.failures->fences_opened().empty());
  hold.unlock();
  // The write lands; the gateway hears that request 77 may be aborted now.
  REQUIRE(eventually([&] { return f.failures->fences_opened() == std::vector<uint64_t>{77}; }));
  sender.join();
  CHECK(f.receiver->writes_in_flight() == 0);
  CHECK(f.receiver->open_transfers() == 0);
  // The chunks after it were refused: the transfer had closed.
  CHECK(r.error.find("did not issue (or has closed)") != std::string::npos);
  CHECK(f.rows_written() == 40);
}

TEST_CASE("Over UCX, a transfer fills exactly the reserved rows, in place or through the workers", "[kv_data_plane][ucx_link]") {
  REQUIRE(ucx_unavailable() == "");
  for (bool in_place : {false, true}) {
    for (DataProtection p : {DataProtection::sealed, DataProtection::trusted_fabric}) {
      CAPTURE(in_place, static_cast<int>(p));
      Fixture f(p, in_place, DataTransport::ucx);
      FlatPool prefill;
      prefill.fill_transfer_rows();
      const uint64_t ticket = f.reserve();
      KvDataSend s = f.transfer(ticket);
      if (in_place) s.spans = prefill.spans();
      const KvDataResult r = send_kv_over_data_plane(f.system, f.target(p), s);
      REQUIRE(r.error.empty());
      CHECK(r.transport == DataTransport::ucx);
      CHECK(r.ring);  // the decode node mapped the prefill node's ring: chunks read in place
      CHECK(r.bytes == 40 * kLayers * kTokenBytes);
      CHECK(f.server->chunks() == kLayers);
      CHECK(f.receiver->writes_in_flight() == 0);
      for (int32_t l = 0; l < kLayers; ++l) {
        for (int32_t t = 0; t < 40; ++t) {
          if (in_place) {
            REQUIRE(std::memcmp(f.decode_flat.row(l, 500 + t), prefill.row(l, 100 + t), kTokenBytes) == 0);
          } else {
            const auto& got = f.decode_pool->rows.at({l, 500 + t});
            for (int64_t i = 0; i < kTokenBytes; ++i) REQUIRE(got[static_cast<size_t>(i)] == byte_of(l, 100 + t, i));
          }
        }
      }
      CHECK(f.receiver->commit(ticket).error.empty());
      CHECK(f.failures->size() == 0);
    }
  }
}

TEST_CASE("A sender asking for UCX from a node that runs sockets only stays on the socket", "[kv_data_plane][ucx_link]") {
  Fixture f;  // sockets only
  const uint64_t ticket = f.reserve();
  KvDataTarget t = f.target();
  t.transport = DataTransport::ucx;
  const KvDataResult r = send_kv_over_data_plane(f.system, t, f.transfer(ticket));
  REQUIRE(r.error.empty());
  CHECK(r.transport == DataTransport::socket);
  CHECK(f.rows_written() == 40 * kLayers);
  // And the other way round: a UCX node takes a sender that asks for the socket.
  Fixture g(DataProtection::sealed, false, DataTransport::ucx);
  const uint64_t again = g.reserve();
  KvDataTarget plain = g.target();
  plain.transport = DataTransport::socket;
  const KvDataResult q = send_kv_over_data_plane(g.system, plain, g.transfer(again));
  REQUIRE(q.error.empty());
  CHECK(q.transport == DataTransport::socket);
}

TEST_CASE("Over UCX, a damaged frame fails its request, and a cancel or a lost decode node ends a transfer at once", "[kv_data_plane][ucx_link]") {
  {
    Fixture f(DataProtection::sealed, false, DataTransport::ucx);
    const uint64_t ticket = f.reserve();
    KvDataSend damaged = f.transfer(ticket);
    damaged.corrupt_chunk = 1;
    CHECK(!send_kv_over_data_plane(f.system, f.target(), damaged).error.empty());
    REQUIRE(eventually([&] { return f.failures->size() == 1; }));
    CHECK(f.failures->got[0].first == 77);
    CHECK(f.failures->got[0].second == "a data plane payload fails its tag");
    CHECK(f.rows_written() == 40);
  }
  for (bool lose_node : {false, true}) {
    CAPTURE(lose_node);
    Fixture f(DataProtection::sealed, false, DataTransport::ucx);
    const uint64_t ticket = f.reserve();
    KvDataSend s = f.transfer(ticket);
    // 30 chunks of 4 tokens, so the transfer is far from its end when the
    // test strikes (with a chunk per layer, all three could be acknowledged
    // before the cancel, and the transfer would rightly succeed).
    s.plan = plan_kv_chunks(40, kLayout, 4 * kTokenBytes);
    REQUIRE(s.plan.size() == 30);
    s.pause_per_chunk = std::chrono::milliseconds(100);
    s.cancel = std::make_shared<KvDataCancel>();
    KvDataResult r;
    const auto t0 = std::chrono::steady_clock::now();
    std::thread sender([&] { r = send_kv_over_data_plane(f.system, f.target(), s); });
    REQUIRE(eventually([&] { return f.server->chunks() >= 2; }));
    if (lose_node) {
      f.server.reset();  // its connections shut down, as when the process dies
    } else {
      s.cancel->cancel();
    }
    sender.join();
    CHECK(!r.error.empty());
    // Long before the 30-layer transfer's 3 s of pauses, or any timeout.
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(2500));
    CHECK(f.rows_written() < 40 * kLayers);
  }
}

TEST_CASE("Transfers to one data port take turns on a kept connection, silent between them past the timeout for a peer gone, and one the port closed or of a session that ended is not used again", "[kv_data_plane][ucx_link]") {
  for (DataTransport transport : {DataTransport::socket, DataTransport::ucx}) {
    CAPTURE(static_cast<int>(transport));
    if (transport == DataTransport::ucx) REQUIRE(ucx_unavailable() == "");
    // The port's limits for a silent peer (inside a transfer) and for a
    // silent kept connection (between transfers) are short here, so that
    // both run out within the test.
    Fixture f(DataProtection::sealed, true, transport, std::chrono::milliseconds(400), std::chrono::milliseconds(1500));
    FlatPool prefill;
    prefill.fill_transfer_rows();
    auto links = std::make_shared<KvDataLinks>(std::chrono::seconds(10));
    // Request 77 + n into rows 500 + 40 n...: each lands in its own rows.
    auto send = [&](int n) {
      std::vector<int32_t> rows;
      for (int32_t t = 0; t < 40; ++t) rows.push_back(500 + 40 * n + t);
      const uint64_t ticket = f.receiver->open(77 + static_cast<uint64_t>(n), rows);
      KvDataSend s = f.transfer(ticket);
      s.spans = prefill.spans();
      s.links = links;
      const KvDataResult r = send_kv_over_data_plane(f.system, f.target(), s);
      if (r.error.empty()) {
        CHECK(f.receiver->writes_in_flight() == 0);
        for (int32_t l = 0; l < kLayers; ++l) {
          for (int32_t t = 0; t < 40; ++t) {
            REQUIRE(std::memcmp(f.decode_flat.row(l, 500 + 40 * n + t), prefill.row(l, 100 + t), kTokenBytes) == 0);
          }
        }
        CHECK(f.receiver->commit(ticket).error.empty());
      }
      return r;
    };
    const KvDataResult first = send(0);
    REQUIRE(first.error.empty());
    CHECK(!first.reused);
    CHECK(first.transport == transport);
    // Back to back: the same connection (the same UCX endpoint), the frames'
    // sequence numbers going on under the same keys.
    for (int n = 1; n <= 3; ++n) {
      const KvDataResult again = send(n);
      REQUIRE(again.error.empty());
      CHECK(again.reused);
      CHECK(again.transport == transport);
    }
    // Silent between transfers for twice the timeout of a peer gone (as
    // while a long prompt computes): kept, and used again.
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    const KvDataResult after_pause = send(7);
    REQUIRE(after_pause.error.empty());
    CHECK(after_pause.reused);
    CHECK(f.server->accepted() == 1);
    CHECK(links->dialled() == 1);
    CHECK(links->reused() == 4);
    // Idle past the port's limit for a kept connection: the port closed it
    // (quietly: nothing was in hand), and the next transfer dials anew
    // instead of failing on it.
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    const KvDataResult after_idle = send(4);
    REQUIRE(after_idle.error.empty());
    CHECK(!after_idle.reused);
    CHECK(f.server->accepted() == 2);
    CHECK(f.failures->size() == 0);
    // The join that the connection proved ends (the prefill node left): the
    // port takes no more chunks over it, and a new connection is refused too.
    f.sessions->remove(DataSessions::id_of(f.key));
    // (The kept connection breaks before any answer, so the sender dials
    // once more, and that handshake is refused.)
    const KvDataResult refused = send(5);
    CHECK(!refused.error.empty());
    CHECK(links->dialled() == 3);
    // Joined again: the connection that failed was not kept.
    f.sessions->add(f.key);
    const KvDataResult rejoined = send(6);
    REQUIRE(rejoined.error.empty());
    CHECK(!rejoined.reused);
    CHECK(links->dialled() == 4);
    CHECK(links->reused() == 5);
  }
}

}  // namespace actorlm
