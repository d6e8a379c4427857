// What a data plane connection costs a transfer: one short prompt's KV (the
// default model's shape, float32: 30 layers, 1,536 bytes a token and layer)
// sent again and again from one pool to another in this process, through a
// decode node's data port on loopback, each transfer either on a new
// connection (TCP, the session proof, the keys and, over UCX, a worker and
// an endpoint) or on the one the last transfer kept (KvDataLinks). Rows are
// read and written in place, as on the CPU backend. Rounds alternate the
// four cells; each cell's figure is the median of its transfers.
//
//   ./build/bench/kv_connection_bench [tokens] [transfers] [rounds]

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cluster/transfer/kv_data_plane.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/ucx_link.hpp"

using namespace actorlm;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int32_t kLayers = 30;
constexpr int64_t kTokenBytes = 1536;
const KvLayout kLayout{"bench-model", "f32", kLayers, kTokenBytes};

// A pool of `rows` rows a layer, handed out in place.
struct Pool {
  int32_t rows;
  std::vector<uint8_t> bytes;
  explicit Pool(int32_t n) : rows(n), bytes(static_cast<size_t>(kLayers) * n * kTokenBytes, 7) {}
  KvRowSpans spans() {
    return [this](std::span<const int32_t> rs, int32_t first, int32_t last, std::vector<std::span<uint8_t>>& out) {
      out.clear();
      for (int32_t l = first; l < last; ++l) {
        for (int32_t r : rs) out.emplace_back(bytes.data() + (static_cast<size_t>(l) * rows + r) * kTokenBytes, kTokenBytes);
      }
      return true;
    };
  }
};

caf::behavior quiet_gateway(caf::event_based_actor*) {
  return {[](kv_data_failed_atom, uint64_t, const std::string& why) { std::fprintf(stderr, "failed: %s\n", why.c_str()); },
          [](kv_landed_atom, uint64_t) {}};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int32_t tokens = argc > 1 ? std::atoi(argv[1]) : 272;
  const int transfers = argc > 2 ? std::atoi(argv[2]) : 40;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  if (tokens < 1 || tokens > 4096 || transfers < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: kv_connection_bench [tokens 1..4096] [transfers] [rounds]\n");
    return 2;
  }
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  const caf::actor gateway = system.spawn(quiet_gateway);
  const std::vector<uint8_t> key(32, 0x5a);
  Pool prefill(tokens), decode(tokens);
  std::vector<int32_t> rows(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) rows[static_cast<size_t>(t)] = t;
  const double mb = double(tokens) * kLayers * kTokenBytes / 1e6;
  const bool ucx = ucx_unavailable().empty();
  std::printf("kv_connection_bench: %d tokens (%.1f MB), %d transfers a cell, %d rounds, sealed%s\n", tokens, mb, transfers,
              rounds, ucx ? "" : " (no UCX here: socket only)");

  struct Cell {
    DataTransport transport;
    bool kept;
    std::vector<double> ms;  // medians of each round
  };
  std::vector<Cell> cells;
  for (DataTransport t : {DataTransport::socket, DataTransport::ucx}) {
    if (t == DataTransport::ucx && !ucx) continue;
    for (bool kept : {false, true}) cells.push_back({t, kept, {}});
  }
  for (int round = 0; round < rounds; ++round) {
    std::vector<size_t> order(cells.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = round % 2 ? order.size() - 1 - i : i;
    for (size_t i : order) {
      Cell& cell = cells[i];
      auto receiver = std::make_shared<KvReceiver>(kLayout);
      auto sessions = std::make_shared<DataSessions>();
      sessions->add(key);
      KvDataServerConfig sc;
      sc.transport = cell.transport;
      sc.spans = decode.spans();
      sc.receiver = receiver;
      sc.sessions = sessions;
      sc.gateway = gateway;
      KvDataServer server(system, sc);
      auto links = cell.kept ? std::make_shared<KvDataLinks>() : nullptr;
      std::vector<double> ms;
      for (int n = 0; n <= transfers; ++n) {
        KvDataSend s;
        s.ticket = receiver->open(static_cast<uint64_t>(n + 1), rows);
        s.rows = rows;
        s.plan = plan_kv_chunks(tokens, kLayout, 4 << 20);
        s.spans = prefill.spans();
        s.links = links;
        const auto t0 = Clock::now();
        const KvDataResult r = send_kv_over_data_plane(system, {"127.0.0.1", server.port(), key, DataProtection::sealed, cell.transport}, s);
        const double took = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (!r.error.empty()) {
          std::fprintf(stderr, "kv_connection_bench: a transfer failed: %s\n", r.error.c_str());
          return 1;
        }
        (void)receiver->commit(s.ticket);
        if (n > 0) ms.push_back(took);  // the first (UCX's context, a cold pool) aside
      }
      cell.ms.push_back(median(ms));
    }
  }
  std::printf("| link | connection | ms a transfer (median of rounds) | GB/s | rounds |\n|---|---|---:|---:|---|\n");
  for (const Cell& c : cells) {
    const double m = median(c.ms);
    std::string each;
    for (double x : c.ms) each += (each.empty() ? "" : " / ") + std::to_string(x).substr(0, 5);
    std::printf("| %s | %s | %.2f | %.2f | %s |\n", c.transport == DataTransport::ucx ? "UCX" : "socket",
                c.kept ? "kept" : "new each", m, mb / 1e3 / (m / 1e3), each.c_str());
  }
  caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
  return 0;
}
