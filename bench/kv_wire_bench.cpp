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
//   ./build/bench/kv_wire_bench [tokens] [rounds] [scattered|consecutive]
//
// scattered (the default): each end's rows in a random order over a pool
// twice the prompt, the worst case; consecutive: the rows of a fresh pool,
// where a layer's K (or V) rows are one span.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
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
  const DataKeys keys = derive_data_keys(std::vector<uint8_t>(32, 1), std::vector<uint8_t>(16, 2),
                                         std::vector<uint8_t>(16, 3));
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
  std::thread sender([&] {
    DataSender s(out_link, protection, keys.dialer_to_acceptor);
    for (const auto& [first, last] : plan) {
      const uint8_t header[2] = {static_cast<uint8_t>(first), static_cast<uint8_t>(last)};
      const auto p = pieces<std::span<const uint8_t>>(src, src_rows, first, last);
      s.send(header, p);
    }
  });
  DataReceiver r(in_link, protection, keys.dialer_to_acceptor, 64u << 20);
  std::vector<uint8_t> header;
  uint64_t n = 0;
  for (size_t f = 0; f < plan.size(); ++f) {
    if (!r.next(header, n)) throw std::runtime_error("the sender stopped early");
    const auto p = pieces<std::span<uint8_t>>(dst, dst_rows, header[0], header[1]);
    r.read_payload(p);
  }
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

  std::vector<uint8_t> flat(static_cast<size_t>(bytes), 1);
  const bool ucx = ucx_unavailable().empty();
  if (!ucx) std::fprintf(stderr, "kv_wire_bench: no UCX rows: %s\n", ucx_unavailable().c_str());
  std::vector<double> contiguous, copy, sealed, trusted, ucx_sealed, ucx_trusted;
  for (int i = 0; i < rounds; ++i) {  // alternated
    contiguous.push_back(run_contiguous(src, flat, flat.size()));
    copy.push_back(run_memcpy(src, dst, src_rows, dst_rows));
    sealed.push_back(run_wire(DataProtection::sealed, DataTransport::socket, src, dst, src_rows, dst_rows));
    trusted.push_back(run_wire(DataProtection::trusted_fabric, DataTransport::socket, src, dst, src_rows, dst_rows));
    if (!ucx) continue;
    ucx_sealed.push_back(run_wire(DataProtection::sealed, DataTransport::ucx, src, dst, src_rows, dst_rows));
    ucx_trusted.push_back(run_wire(DataProtection::trusted_fabric, DataTransport::ucx, src, dst, src_rows, dst_rows));
  }
  // The last round's bytes arrived where they belong.
  for (int l = 0; l < kLayers; ++l) {
    for (size_t t = 0; t < tokens; ++t) {
      if (std::memcmp(dst.row(l, 1, dst_rows[t]), src.row(l, 1, src_rows[t]), kRowBytes) != 0) {
        std::fprintf(stderr, "kv_wire_bench: layer %d token %zu arrived wrong\n", l, t);
        return 1;
      }
    }
  }
  const double c = median(copy), m = median(contiguous);
  std::printf("KV of %zu tokens x %d layers (%.1f MB), rows %s, %zu frames, medians of %d alternated rounds\n", tokens,
              kLayers, bytes / 1e6, consecutive ? "consecutive" : "scattered", frames(tokens).size(), rounds);
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
