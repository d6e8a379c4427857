// A head's topology file (cluster/roles/cluster_config.hpp): what it sets,
// relative paths taken from its folder, and every bad entry refused with the
// file and the entry named.

#include "cluster/roles/cluster_config.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

namespace actorlm {
namespace {

struct Folder {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("actorlm-topology-" + std::to_string(reinterpret_cast<uintptr_t>(this)));
  Folder() { std::filesystem::create_directories(dir); }
  ~Folder() { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
};

}  // namespace

TEST_CASE("A topology file sets nodes, security, failover, rebalancing and routing", "[cluster_config]") {
  Folder f;
  f.write("cluster.secret", "a long enough shared secret for the test 0123456789\n");
  const auto path = f.write("topology.json", R"({
    "nodes": ["10.0.0.2:7100", {"address": "10.0.0.3:7101"}],
    "secret_file": "cluster.secret",
    "connect_timeout_s": 12.5, "failover_attempts": 5,
    "rebalance_interval_s": 0.5, "rebalance_gap": 3,
    "routing": {"cache_threshold": 0.25, "balance_abs_threshold": 8, "balance_rel_threshold": 2}
  })");
  const ClusterConfig c = load_topology(path);
  REQUIRE(c.nodes.size() == 2);
  CHECK(c.nodes[0].str() == "10.0.0.2:7100");
  CHECK(c.nodes[1].str() == "10.0.0.3:7101");
  CHECK_FALSE(c.security.secret.empty());
  CHECK(c.connect_timeout_s == 12.5);
  CHECK(c.failover_attempts == 5);
  CHECK(c.rebalance_interval_s == 0.5);
  CHECK(c.rebalance_gap == 3);
  CHECK(c.routing.cache_threshold == 0.25);
  CHECK(c.routing.balance_abs_threshold == 8);
  CHECK(c.routing.balance_rel_threshold == 2);
  // Left out: the defaults (rebalancing off).
  const ClusterConfig d = load_topology(f.write("plain.json", R"({"nodes": ["127.0.0.1:7100"]})"));
  CHECK(d.rebalance_interval_s == 0);
  CHECK(d.rebalance_gap == 2);
  CHECK(d.failover_attempts == 3);
}

TEST_CASE("A bad topology entry is refused, naming the file and the entry", "[cluster_config]") {
  Folder f;
  const std::pair<const char*, const char*> bad[] = {
      {R"([1, 2])", "expected an object"},
      {R"({})", "\"nodes\" must list at least one node"},
      {R"({"nodes": [7]})", "each node is"},
      {R"({"nodes": ["a:1"], "failover_attempts": 1.5})", "failover_attempts must be an integer"},
      {R"({"nodes": ["a:1"], "failover_attempts": 101})", "failover_attempts must be an integer"},
      {R"({"nodes": ["a:1"], "rebalance_gap": 1})", "rebalance_gap must be an integer in [2"},
      {R"({"nodes": ["a:1"], "rebalance_gap": 2.5})", "rebalance_gap must be an integer"},
      {R"({"nodes": ["a:1"], "rebalance_interval_s": -1})", "rebalance_interval_s must be a number"},
      {R"({"nodes": ["a:1"], "rebalance_interval_s": "often"})", "rebalance_interval_s must be a number"},
      {R"({"nodes": ["a:1"], "routing": {"cache_threshold": 2}})", "cache_threshold must be a number"},
      {R"({"nodes": ["a:1"], "remote_worker": "b:2"})", "exclude each other"},
      {R"({"nodes": ["a:1"], "tls": "yes"})", "\"tls\" must be an object"},
  };
  int i = 0;
  for (const auto& [text, why] : bad) {
    CAPTURE(text);
    const auto path = f.write("bad" + std::to_string(i++) + ".json", text);
    CHECK_THROWS_WITH(load_topology(path), Catch::Contains(why) && Catch::Contains(path));
  }
  CHECK_THROWS_WITH(load_topology(f.write("not.json", "{nodes")), Catch::Contains("is not JSON"));
  CHECK_THROWS_WITH(load_topology((f.dir / "missing.json").string()), Catch::Contains("cannot read topology file"));
}

}  // namespace actorlm
