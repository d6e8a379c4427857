// What one decode step costs in messaging, in-process vs across a cluster.
//
// In a cluster, each decode step sends one TokenStream (the step's new token
// per request, with logprob and usage) from the node's gateway to the head's
// router. This times that message, built as the scheduler builds it, for
// batch sizes 1..64:
//   - in-process: to an actor in the same actor system (a local engine);
//   - network: through CAF's middleman to an actor in another process on
//     loopback (a head and a node on one machine; a real network adds its
//     own latency on top);
//   - gated: the same, through the gates a node with a shared secret puts in
//     front of its middleman and a head dials through (cluster/transport/tcp_gate.hpp):
//     two more relays on the path, each way.
// Each figure is a round trip (the message out, a 4-byte answer back), so
// it bounds the one-way cost a step pays from above. Also: the build and
// verify (msg::open) cost of the message itself.
//
// usage: cluster_messaging_bench [round trips per size, default 2000]

#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <algorithm>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "actors/stream_messages.hpp"
#include "actors/wire.hpp"
#include "cluster/transport/remote_setup.hpp"

using namespace actorlm;
using Clock = std::chrono::steady_clock;

namespace {

caf::behavior echo(caf::event_based_actor*) {
  return {[](stream_atom, const WireMessage& in) {
    auto opened = msg::open<fb::TokenStream>(in.bytes);  // what a router does on receipt
    return static_cast<int32_t>(opened ? opened.message->items()->size() : -1);
  }};
}

std::vector<uint8_t> step_stream(int batch) {
  std::vector<TokenEvent> events;
  for (int i = 0; i < batch; ++i) {
    TokenEvent e;
    e.id = 1000 + static_cast<uint64_t>(i);
    e.token = 1234 + i;
    e.logprob = -0.5f;
    e.prompt_tokens = 200;
    e.completion_tokens = 17;
    events.push_back(e);
  }
  return token_stream(events);
}

struct Timing {
  double p50_us, mean_us;
};

// `gap`: idle time before each trip, as a decode step's compute would leave
// the actor system idle between two messages.
Timing round_trips(caf::actor_system& system, const caf::actor& target, const std::vector<uint8_t>& bytes, int n,
                   std::chrono::milliseconds gap) {
  caf::scoped_actor self{system};
  std::vector<double> us;
  us.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n + 50; ++i) {
    if (gap.count() > 0) std::this_thread::sleep_for(gap);
    auto t0 = Clock::now();
    self->request(target, std::chrono::seconds(10), stream_atom::value, WireMessage{bytes})
        .receive([](int32_t) {}, [](const caf::error&) { std::abort(); });
    if (i >= 50) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double x : us) sum += x;
  return {us[us.size() / 2], sum / double(us.size())};
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::max(100, std::atoi(argv[1])) : 2000;
  RemoteSecurity plain;
  plain.secret = "bench";
  int ports[2];
  if (pipe(ports) != 0) return 1;
  // The "node": a separate process (forked before any thread exists) that
  // publishes the echo actor on loopback.
  pid_t child = fork();
  if (child == 0) {
    caf::actor_system_config cfg;
    configure_remote(cfg, plain);
    caf::actor_system system{cfg};
    auto e = system.spawn(echo);
    uint16_t port = publish_actor(system, e, "127.0.0.1", 0);
    GateConfig g;
    g.side = GateSide::acceptor;
    g.secret = plain.secret;
    g.target_host = "127.0.0.1";
    g.target_port = port;
    g.max_frame_payload = plain.max_message_bytes;
    TcpGate gate(g);
    uint16_t both[2] = {port, gate.port()};
    if (write(ports[1], both, sizeof both) != sizeof both) _exit(1);
    pause();
    _exit(0);
  }
  uint16_t both[2] = {0, 0};
  if (read(ports[0], both, sizeof both) != sizeof both) return 1;
  const uint16_t port = both[0];
  caf::actor_system_config cfg;
  configure_remote(cfg, plain);
  caf::actor_system system{cfg};
  auto remote = system.middleman().remote_actor("127.0.0.1", port);
  if (!remote) {
    std::fprintf(stderr, "cannot reach the echo process: %s\n", system.render(remote.error()).c_str());
    return 1;
  }
  auto dial_gate = open_dial_gate(NodeAddress{"127.0.0.1", both[1]}, plain);
  auto gated = system.middleman().remote_actor("127.0.0.1", dial_gate->port());
  if (!gated) {
    std::fprintf(stderr, "cannot reach the echo process through the gates: %s\n", system.render(gated.error()).c_str());
    return 1;
  }
  auto local = system.spawn(echo);
  std::printf("# one decode step's TokenStream, round trip (message out, 4-byte answer back), %d trips each\n", n);
  std::printf("%6s %8s %12s %16s %16s %16s %16s %12s %12s\n", "batch", "bytes", "build+open us", "in-process p50",
              "in-process mean", "network p50", "network mean", "gated p50", "gated mean");
  for (int batch : {1, 8, 32, 64}) {
    auto t0 = Clock::now();
    std::vector<uint8_t> bytes;
    for (int i = 0; i < 200; ++i) {
      bytes = step_stream(batch);
      if (!msg::open<fb::TokenStream>(bytes)) return 1;
    }
    double build_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 200;
    Timing in = round_trips(system, local, bytes, n, {});
    Timing net = round_trips(system, *remote, bytes, n, {});
    Timing gate = round_trips(system, *gated, bytes, n, {});
    std::printf("%6d %8zu %12.1f %16.1f %16.1f %16.1f %16.1f %12.1f %12.1f\n", batch, bytes.size(), build_us, in.p50_us,
                in.mean_us, net.p50_us, net.mean_us, gate.p50_us, gate.mean_us);
  }
  // The same with the system idle for a decode step's length before each
  // message: what a step pays when the actors' threads have gone to sleep.
  const auto gap = std::chrono::milliseconds(30);
  const int idle_trips = std::max(20, n / 20);
  auto bytes = step_stream(32);
  Timing in = round_trips(system, local, bytes, idle_trips, gap);
  Timing net = round_trips(system, *remote, bytes, idle_trips, gap);
  Timing gate = round_trips(system, *gated, bytes, idle_trips, gap);
  std::printf("# after %lld ms idle (batch 32, %d trips): in-process p50 %.1f mean %.1f us; network p50 %.1f mean %.1f us; "
              "gated p50 %.1f mean %.1f us\n",
              static_cast<long long>(gap.count()), idle_trips, in.p50_us, in.mean_us, net.p50_us, net.mean_us, gate.p50_us,
              gate.mean_us);
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  return 0;
}
