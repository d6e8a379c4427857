// The data plane's wire against memcpy: one request's KV (a 2,000-token
// prompt of the default model's shape, float32) gathered from scattered pool
// rows, sent over a TCP connection on loopback in frames of at most 4 MiB, and
// scattered into other rows at the far end; sealed (AES-256-GCM) and on a
// trusted fabric (XXH3-128); then the same frames over UCX (ucx_link.hpp:
// the receiver reading the sender's shared ring in place, as for two nodes on
// one machine; with UCX_ALLOC_PRIO=mmap the ring cannot be shared, and the
// blocks go as UCX messages, shared memory and cross-memory attach).
// Against: a memcpy of every row from its source to its destination, the
// floor any transfer has, and a contiguous memcpy of the same byte count.
// Sender and receiver are two threads, as two nodes' data-plane threads
// would be.
//
//   ./build/bench/kv_wire_bench [tokens] [rounds] [scattered|consecutive] [processes]
//
// scattered (the default): each end's rows in a random order over a pool
// twice the prompt, the worst case; consecutive: the rows of a fresh pool,
// where a layer's K (or V) rows are one span. processes: the receiver is a
// child process with its own pool, as a decode node is (forked before UCX
// starts); its time is the sender's, from the first byte to the receiver's
// answer that every frame is in. KV_WIRE_PIN=1 pins the two processes to
// cores 0 and 1, as bench/pd_bench.py pins its nodes.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cluster/transport/data_channel.hpp"
#include "cluster/transport/ucx_link.hpp"

using namespace actorlm;
using Clock = std::chrono::steady_clock;

namespace {

// SmolLM2-135M: 30 layers, 3 KV heads of 64; K and V rows of 768 bytes.
constexpr int kLayers = 30;
constexpr size_t kRowBytes = 3 * 64 * sizeof(float);
constexpr size_t kFrameBytes = 4u << 20;

// One layer's K and V pools of `rows` rows each, per layer.
struct Pool {
  int64_t rows;
  std::vector<uint8_t> bytes;
  explicit Pool(int64_t r) : rows(r), bytes(static_cast<size_t>(r) * kLayers * 2 * kRowBytes) {}
  uint8_t* row(int layer, int kv, int32_t r) {
    return bytes.data() + ((static_cast<size_t>(layer) * 2 + kv) * rows + r) * kRowBytes;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Frames of whole layers (as many as fit in kFrameBytes), each the K and V
// row of every token: the order plan_kv_chunks uses.
std::vector<std::pair<int, int>> frames(size_t tokens) {
  const int per = std::max<int>(1, static_cast<int>(kFrameBytes / (tokens * 2 * kRowBytes)));
  std::vector<std::pair<int, int>> out;
  for (int l = 0; l < kLayers; l += per) out.emplace_back(l, std::min(kLayers, l + per));
  return out;
}

// Layer by layer, the K rows and then the V rows of every token; rows next
// to each other in the pool are one span, as KvRowSpans hands them out.
template <class Span, class PoolT>
std::vector<Span> pieces(PoolT& pool, const std::vector<int32_t>& rows, int first, int last) {
  std::vector<Span> out;
  for (int l = first; l < last; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int32_t r : rows) {
        auto* p = pool.row(l, kv, r);
        if (!out.empty() && out.back().data() + out.back().size() == p) {
          out.back() = Span(out.back().data(), out.back().size() + kRowBytes);
        } else {
          out.emplace_back(p, kRowBytes);
        }
      }
    }
  }
  return out;
}

// The receiving end of a transfer: its `frame_count` frames, scattered into
// `dst_rows`.
void receive_all(DataLink& link, DataProtection protection, const DataKeys& keys, Pool& dst,
                 const std::vector<int32_t>& dst_rows, size_t frame_count) {
  DataReceiver r(link, protection, keys.dialer_to_acceptor, 64u << 20);
  std::vector<uint8_t> header;
  uint64_t n = 0;
  for (size_t f = 0; f < frame_count; ++f) {
    if (!r.next(header, n)) throw std::runtime_error("the sender stopped early");
    const auto p = pieces<std::span<uint8_t>>(dst, dst_rows, header[0], header[1]);
    r.read_payload(p);
  }
}

// FNV-1a over the rows a transfer moves, in order: the two processes'
// check that the bytes arrived where they belong.
uint64_t rows_hash(Pool& pool, const std::vector<int32_t>& rows) {
  uint64_t h = 1469598103934665603ull;
  for (int l = 0; l < kLayers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int32_t r : rows) {
        const uint8_t* p = pool.row(l, kv, r);
        for (size_t i = 0; i < kRowBytes; i += 64) h = (h ^ p[i]) * 1099511628211ull;
      }
    }
  }
  return h;
}

// To and from the other process, over the socket pair (data_link.hpp's).
void write_all(int fd, const void* p, size_t n) {
  send_all(fd, static_cast<const uint8_t*>(p), n, "kv_wire_bench: to the other process");
}

void read_all(int fd, void* p, size_t n) {
  recv_all(fd, static_cast<uint8_t*>(p), n, "kv_wire_bench: from the other process");
}

// Every frame of a transfer of `src_rows`, as a prefill node sends them.
void send_frames(DataLink& link, DataProtection protection, const DataKeys& keys, Pool& src,
                 const std::vector<int32_t>& src_rows) {
  DataSender s(link, protection, keys.dialer_to_acceptor);
  for (const auto& [first, last] : frames(src_rows.size())) {
    const uint8_t header[2] = {static_cast<uint8_t>(first), static_cast<uint8_t>(last)};
    s.send(header, pieces<std::span<const uint8_t>>(src, src_rows, first, last));
  }
}

void send_bytes(int fd, const std::vector<uint8_t>& v) {
  const uint32_t n = static_cast<uint32_t>(v.size());
  write_all(fd, &n, sizeof n);
  write_all(fd, v.data(), v.size());
}

std::vector<uint8_t> recv_bytes(int fd) {
  uint32_t n = 0;
  read_all(fd, &n, sizeof n);
  std::vector<uint8_t> v(n);
  read_all(fd, v.data(), n);
  return v;
}

DataKeys bench_keys() {
  return derive_data_keys(std::vector<uint8_t>(32, 1), std::vector<uint8_t>(16, 2), std::vector<uint8_t>(16, 3));
}

// The child: one transfer per order read from `xchg` (protection, transport;
// 0xff ends), each on a connection accepted from `listener`, answered with
// the rows' hash.
[[noreturn]] void receiver_process(int listener, int xchg, int64_t pool_rows, const std::vector<int32_t>& dst_rows,
                                   size_t frame_count) {
  Pool dst(pool_rows);
  const DataKeys keys = bench_keys();
  for (;;) {
    uint8_t order[2];
    read_all(xchg, order, 2);
    if (order[0] == 0xff) ::_exit(0);
    const auto protection = static_cast<DataProtection>(order[0]);
    const int in = ::accept(listener, nullptr, nullptr);
    SocketLink socket(in);
    std::unique_ptr<UcxLink> ucx;
    if (order[1] != 0) {
      ucx = std::make_unique<UcxLink>(in, std::chrono::milliseconds(30000));
      ucx->connect(recv_bytes(xchg));
      send_bytes(xchg, ucx->address());
    }
    const uint8_t ready = 1;
    write_all(xchg, &ready, 1);
    receive_all(ucx ? static_cast<DataLink&>(*ucx) : socket, protection, keys, dst, dst_rows, frame_count);
    const uint64_t h = rows_hash(dst, dst_rows);
    write_all(xchg, &h, sizeof h);
    ucx.reset();
    ::close(in);
  }
}

// The parent's side of one transfer to the receiver process.
double run_wire_to_process(DataProtection protection, DataTransport transport, int port, int xchg, Pool& src,
                           const std::vector<int32_t>& src_rows) {
  const uint8_t order[2] = {static_cast<uint8_t>(protection), static_cast<uint8_t>(transport == DataTransport::ucx)};
  write_all(xchg, order, 2);
  const int out = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = static_cast<in_port_t>(port);
  if (::connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("cannot connect");
  SocketLink socket(out);
  std::unique_ptr<UcxLink> ucx;
  if (transport == DataTransport::ucx) {
    ucx = std::make_unique<UcxLink>(out, std::chrono::milliseconds(30000), /*offer_ring=*/true);
    send_bytes(xchg, ucx->address());
    ucx->connect(recv_bytes(xchg));
  }
  uint8_t ready = 0;
  read_all(xchg, &ready, 1);
  const auto t0 = Clock::now();
  send_frames(ucx ? static_cast<DataLink&>(*ucx) : socket, protection, bench_keys(), src, src_rows);
  uint64_t h = 0;
  read_all(xchg, &h, sizeof h);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  if (h != rows_hash(src, src_rows)) throw std::runtime_error("kv_wire_bench: the receiver process got other bytes");
  ucx.reset();
  ::close(out);
  return took;
}


double run_wire(DataProtection protection, DataTransport transport, Pool& src, Pool& dst, const std::vector<int32_t>& src_rows,
                const std::vector<int32_t>& dst_rows) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0) {
    throw std::runtime_error("cannot listen on loopback");
  }
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const int out = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("cannot connect");
  const int in = ::accept(listener, nullptr, nullptr);
  const DataKeys keys = bench_keys();
  const auto plan = frames(src_rows.size());
  // UCX: the TCP connection stays as each link's lifeline, as on a node.
  SocketLink out_socket(out), in_socket(in);
  std::unique_ptr<UcxLink> out_ucx, in_ucx;
  if (transport == DataTransport::ucx) {
    // The sending end offers its ring, as a prefill node's link does.
    out_ucx = std::make_unique<UcxLink>(out, std::chrono::milliseconds(30000), /*offer_ring=*/true);
    in_ucx = std::make_unique<UcxLink>(in, std::chrono::milliseconds(30000));
    in_ucx->connect(out_ucx->address());
    out_ucx->connect(in_ucx->address());
  }
  DataLink& out_link = out_ucx ? static_cast<DataLink&>(*out_ucx) : out_socket;
  DataLink& in_link = in_ucx ? static_cast<DataLink&>(*in_ucx) : in_socket;
  const auto t0 = Clock::now();
  std::thread sender([&] { send_frames(out_link, protection, keys, src, src_rows); });
  receive_all(in_link, protection, keys, dst, dst_rows, plan.size());
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  sender.join();
  out_ucx.reset();
  in_ucx.reset();
  ::close(out);
  ::close(in);
  ::close(listener);
  return s;
}

double run_contiguous(const Pool& src, std::vector<uint8_t>& dst, size_t bytes) {
  const auto t0 = Clock::now();
  std::memcpy(dst.data(), src.bytes.data(), bytes);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double run_memcpy(Pool& src, Pool& dst, const std::vector<int32_t>& src_rows, const std::vector<int32_t>& dst_rows) {
  const auto t0 = Clock::now();
  for (int l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < src_rows.size(); ++i) {
      std::memcpy(dst.row(l, 0, dst_rows[i]), src.row(l, 0, src_rows[i]), kRowBytes);
      std::memcpy(dst.row(l, 1, dst_rows[i]), src.row(l, 1, src_rows[i]), kRowBytes);
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}


}  // namespace

int main(int argc, char** argv) {
  const size_t tokens = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const bool consecutive = argc > 3 && std::string(argv[3]) == "consecutive";
  const bool processes = argc > 4 && std::string(argv[4]) == "processes";
  // Pools twice the prompt, rows taken in a random order at each end.
  const int64_t pool_rows = static_cast<int64_t>(tokens) * 2;
  Pool src(pool_rows), dst(pool_rows);
  std::mt19937 rng(1);
  uint64_t x = 1;  // splitmix64: random enough that nothing compresses, and quick
  for (size_t i = 0; i + 8 <= src.bytes.size(); i += 8) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(src.bytes.data() + i, &z, 8);
  }
  std::vector<int32_t> all(static_cast<size_t>(pool_rows));
  std::iota(all.begin(), all.end(), 0);
  if (!consecutive) std::shuffle(all.begin(), all.end(), rng);
  const std::vector<int32_t> src_rows(all.begin(), all.begin() + static_cast<long>(tokens));
  if (!consecutive) std::shuffle(all.begin(), all.end(), rng);
  const std::vector<int32_t> dst_rows(all.begin() + (consecutive ? static_cast<long>(tokens) : 0),
                                      all.begin() + static_cast<long>(consecutive ? 2 * tokens : tokens));
  const double bytes = static_cast<double>(tokens) * kLayers * 2 * kRowBytes;

  // The receiver process is forked before this one starts UCX (a context is
  // not carried across fork).
  int port = 0, xchg = -1;
  pid_t child = -1;
  if (processes) {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int pair[2];
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        ::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) {
      throw std::runtime_error("cannot listen on loopback");
    }
    port = addr.sin_port;
    child = ::fork();
    // KV_WIRE_PIN=1: the sender on core 0, the receiver on core 1, as
    // bench/pd_bench.py pins its two nodes.
    const bool pin = std::getenv("KV_WIRE_PIN") != nullptr;
    if (pin) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(child == 0 ? 1 : 0, &one);
      ::sched_setaffinity(0, sizeof one, &one);
    }
    if (child == 0) {
      ::close(pair[0]);
      receiver_process(listener, pair[1], pool_rows, dst_rows, frames(tokens).size());
    }
    ::close(pair[1]);
    ::close(listener);
    xchg = pair[0];
  }
  auto wire = [&](DataProtection protection, DataTransport transport) {
    return processes ? run_wire_to_process(protection, transport, port, xchg, src, src_rows)
                     : run_wire(protection, transport, src, dst, src_rows, dst_rows);
  };

  std::vector<uint8_t> flat(static_cast<size_t>(bytes), 1);
  const bool ucx = ucx_unavailable().empty();
  if (!ucx) std::fprintf(stderr, "kv_wire_bench: no UCX rows: %s\n", ucx_unavailable().c_str());
  std::vector<double> contiguous, copy, sealed, trusted, ucx_sealed, ucx_trusted;
  for (int i = 0; i < rounds; ++i) {  // alternated
    contiguous.push_back(run_contiguous(src, flat, flat.size()));
    copy.push_back(run_memcpy(src, dst, src_rows, dst_rows));
    sealed.push_back(wire(DataProtection::sealed, DataTransport::socket));
    trusted.push_back(wire(DataProtection::trusted_fabric, DataTransport::socket));
    if (!ucx) continue;
    ucx_sealed.push_back(wire(DataProtection::sealed, DataTransport::ucx));
    ucx_trusted.push_back(wire(DataProtection::trusted_fabric, DataTransport::ucx));
  }
  if (processes) {
    const uint8_t end[2] = {0xff, 0};
    write_all(xchg, end, 2);
    ::waitpid(child, nullptr, 0);
  }
  // The last round's bytes arrived where they belong (in processes mode
  // the receiver's hash is compared after each transfer).
  for (int l = 0; l < kLayers; ++l) {
    for (size_t t = 0; t < tokens; ++t) {
      if (std::memcmp(dst.row(l, 1, dst_rows[t]), src.row(l, 1, src_rows[t]), kRowBytes) != 0) {
        std::fprintf(stderr, "kv_wire_bench: layer %d token %zu arrived wrong\n", l, t);
        return 1;
      }
    }
  }
  const double c = median(copy), m = median(contiguous);
  std::printf("KV of %zu tokens x %d layers (%.1f MB), rows %s, %zu frames, receiver %s, medians of %d alternated rounds\n",
              tokens, kLayers, bytes / 1e6, consecutive ? "consecutive" : "scattered", frames(tokens).size(),
              processes ? "in a child process" : "a thread", rounds);
  std::printf("| path | ms | GB/s | of the row-to-row memcpy | of a contiguous memcpy |\n|---|---:|---:|---:|---:|\n");
  auto row = [&](const char* name, double t) {
    std::printf("| %s | %.1f | %.2f | %.0f%% | %.0f%% |\n", name, t * 1e3, bytes / t / 1e9, 100 * c / t, 100 * m / t);
  };
  row("memcpy, contiguous", m);
  row("memcpy, row to row", c);
  row("TCP loopback, sealed (AES-256-GCM)", median(sealed));
  row("TCP loopback, trusted fabric (XXH3-128)", median(trusted));
  if (ucx) {
    row("UCX, sealed (AES-256-GCM)", median(ucx_sealed));
    row("UCX, trusted fabric (XXH3-128)", median(ucx_trusted));
  }
  return 0;
}
