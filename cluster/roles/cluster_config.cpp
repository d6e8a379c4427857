#include "cluster/roles/cluster_config.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace actorlm {

ClusterConfig load_topology(const std::string& path) {
  namespace fs = std::filesystem;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read topology file " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error("topology file " + path + " is not JSON: " + e.what());
  }
  auto fail = [&](const std::string& why) { return std::runtime_error("topology file " + path + ": " + why); };
  fs::path dir = fs::path(path).parent_path();
  auto file = [&](const nlohmann::json& v, const char* what) {
    if (!v.is_string()) throw fail(std::string(what) + " must be a path");
    fs::path p = v.get<std::string>();
    return (p.is_relative() ? dir / p : p).string();
  };
  auto number = [&](const nlohmann::json& obj, const char* key, double lo, double hi, double fallback) {
    if (!obj.contains(key)) return fallback;
    const auto& v = obj[key];
    if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
      throw fail(std::string(key) + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v.get<double>();
  };
  auto integer = [&](const nlohmann::json& obj, const char* key, int64_t lo, int64_t hi, int32_t fallback) {
    if (!obj.contains(key)) return fallback;
    const auto& v = obj[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      throw fail(std::string(key) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v.get<int32_t>();
  };
  if (!j.is_object()) throw fail("expected an object");
  ClusterConfig c;
  if (j.contains("remote_worker")) {
    if (!j["remote_worker"].is_string()) throw fail("\"remote_worker\" must be \"host:port\"");
    try {
      c.remote_worker = parse_node_address(j["remote_worker"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw fail(e.what());
    }
  }
  if (c.remote_worker.host.empty() && (!j.contains("nodes") || !j["nodes"].is_array() || j["nodes"].empty())) {
    throw fail("\"nodes\" must list at least one node (or name a \"remote_worker\")");
  }
  if (!c.remote_worker.host.empty() && j.contains("nodes")) throw fail("\"nodes\" and \"remote_worker\" exclude each other");
  if (!j.contains("nodes")) j["nodes"] = nlohmann::json::array();
  if (j["nodes"].size() > 1024) throw fail("at most 1024 nodes");
  for (const auto& n : j["nodes"]) {
    std::string addr;
    if (n.is_string()) {
      addr = n.get<std::string>();
    } else if (n.is_object() && n.contains("address") && n["address"].is_string()) {
      addr = n["address"].get<std::string>();
    } else {
      throw fail("each node is \"host:port\" or {\"address\": \"host:port\"}");
    }
    try {
      c.nodes.push_back(parse_node_address(addr));
    } catch (const std::invalid_argument& e) {
      throw fail(e.what());
    }
  }
  if (j.contains("tls")) {
    const auto& t = j["tls"];
    if (!t.is_object()) throw fail("\"tls\" must be an object with cert, key and ca");
    if (t.contains("cert")) c.security.tls_cert = file(t["cert"], "tls.cert");
    if (t.contains("key")) c.security.tls_key = file(t["key"], "tls.key");
    if (t.contains("ca")) c.security.tls_ca = file(t["ca"], "tls.ca");
  }
  if (j.contains("secret_file")) c.security.secret = read_secret_file(file(j["secret_file"], "secret_file"));
  if (j.contains("allow_plain_remote")) c.security.allow_plain_remote = j["allow_plain_remote"].is_boolean() && j["allow_plain_remote"].get<bool>();
  c.connect_timeout_s = number(j, "connect_timeout_s", 0, 3600, c.connect_timeout_s);
  c.failover_attempts = integer(j, "failover_attempts", 0, 100, c.failover_attempts);
  c.rebalance_interval_s = number(j, "rebalance_interval_s", 0, 3600, c.rebalance_interval_s);
  c.rebalance_gap = integer(j, "rebalance_gap", 2, 1 << 20, c.rebalance_gap);
  if (j.contains("routing")) {
    const auto& r = j["routing"];
    if (!r.is_object()) throw fail("\"routing\" must be an object");
    c.routing.cache_threshold = number(r, "cache_threshold", 0, 1, c.routing.cache_threshold);
    c.routing.balance_abs_threshold =
        static_cast<int32_t>(number(r, "balance_abs_threshold", 0, 1 << 20, c.routing.balance_abs_threshold));
    c.routing.balance_rel_threshold = number(r, "balance_rel_threshold", 1, 1e6, c.routing.balance_rel_threshold);
  }
  return c;
}

}  // namespace actorlm
