// CAF's side of a cluster over mutual TLS, with two actor systems in one
// process (a node's and a head's, each with its own middleman thread): a
// head's link to a node stays up while other peers fail their handshakes on
// the node's port (cluster/transport/tls_error_queue.hpp says why it did not).

#include "cluster/transport/remote_setup.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "cluster/transport/tls_error_queue.hpp"

using namespace actorlm;
namespace fs = std::filesystem;

namespace {

// A CA, and certificates it signs, made with the openssl command in a
// folder of their own.
struct Pki {
  fs::path dir;

  Pki() {
    std::string templ = (fs::temp_directory_path() / "actorlm-tls-XXXXXX").string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    dir = templ;
  }
  ~Pki() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }

  void openssl(const std::string& args) const {
    std::string cmd = "cd '" + dir.string() + "' && openssl " + args + " >/dev/null 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  void make_ca(const std::string& name) const {
    openssl("req -x509 -newkey rsa:2048 -nodes -keyout " + name + ".key -out " + name + ".pem -days 2 -subj /CN=" + name);
  }
  void make_cert(const std::string& name, const std::string& ca) const {
    openssl("req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " + name + ".csr -subj /CN=" + name);
    openssl("x509 -req -in " + name + ".csr -CA " + ca + ".pem -CAkey " + ca + ".key -CAcreateserial -out " + name +
            ".pem -days 2");
  }
  RemoteSecurity security(const std::string& name, const std::string& ca) const {
    RemoteSecurity s;
    s.tls_cert = (dir / (name + ".pem")).string();
    s.tls_key = (dir / (name + ".key")).string();
    s.tls_ca = (dir / (ca + ".pem")).string();
    return s;
  }
};

struct RemoteSystem {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;

  explicit RemoteSystem(const RemoteSecurity& security) {
    configure_remote(cfg, security);
    system = std::make_unique<caf::actor_system>(cfg);
  }
};

// Connects to the node's port, sends `bytes` (maybe none) and hangs up.
void poke(uint16_t port, const std::string& bytes) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  REQUIRE(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  if (!bytes.empty()) REQUIRE(::send(s, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::close(s);
}

// The actor published on the node's port, as `system`'s dialer answers a
// connect; null, with `why`, when the connection is refused.
caf::actor dial(caf::actor_system& system, uint16_t port, std::string* why) {
  caf::scoped_actor self{system};
  caf::actor out;
  self->request(dialer(system), std::chrono::seconds(20), caf::connect_atom::value, std::string("127.0.0.1"), port)
      .receive([&](const caf::node_id&, const caf::strong_actor_ptr& ptr,
                   const std::set<std::string>&) { out = caf::actor_cast<caf::actor>(ptr); },
               [&](const caf::error& e) { *why = system.render(e); });
  return out;
}

int ask(caf::actor_system& system, const caf::actor& echo, int x) {
  caf::scoped_actor self{system};
  int answer = -1;
  self->request(echo, std::chrono::seconds(10), x).receive([&](int y) { answer = y; }, [&](const caf::error&) {});
  return answer;
}

}  // namespace

TEST_CASE("This test binary clears OpenSSL's error queue before CAF's TLS calls", "[tls]") {
  CHECK(tls_error_queue_cleared());
}

TEST_CASE("Peers that fail their TLS handshake on a node's port leave the node's other TLS links up", "[tls]") {
  Pki pki;
  pki.make_ca("ca");
  pki.make_ca("rogue-ca");
  pki.make_cert("node", "ca");
  pki.make_cert("head", "ca");
  pki.make_cert("intruder", "rogue-ca");

  RemoteSystem node(pki.security("node", "ca"));
  // An argument: CAF 0.17 binds a null reference spawning a function of none (UBSan).
  auto echo = node.system->spawn([](int step) -> caf::behavior {
    return {[step](int x) { return x + step; }};
  }, 1);
  // The node's system waits for it at its end, also when a failed check
  // leaves this case early.
  std::shared_ptr<void> stop_echo(nullptr, [echo](void*) { caf::anon_send_exit(echo, caf::exit_reason::user_shutdown); });
  const uint16_t port = publish_actor(*node.system, echo, "127.0.0.1", 0);

  RemoteSystem head(pki.security("head", "ca"));
  std::string why;
  caf::actor remote = dial(*head.system, port, &why);
  REQUIRE(remote);
  auto lost = std::make_shared<std::atomic<bool>>(false);
  remote->attach_functor([lost](const caf::error&) { lost->store(true); });
  REQUIRE(ask(*head.system, remote, 41) == 42);

  // A port scan, a client speaking HTTP, and a peer whose certificate comes
  // from another CA: each fails in the node's TLS accept.
  poke(port, "");
  poke(port, "GET / HTTP/1.0\r\n\r\n");
  {
    RemoteSystem intruder(pki.security("intruder", "rogue-ca"));
    std::string refused;
    CHECK_FALSE(dial(*intruder.system, port, &refused));
  }
  // Heartbeats cross the link every 500 ms (configure_remote): the node reads
  // it several times over, each read ending in "would block".
  std::this_thread::sleep_for(std::chrono::seconds(2));
  CHECK_FALSE(lost->load());
  CHECK(ask(*head.system, remote, 1) == 2);
}
