#include "apps/cluster_flags.hpp"

namespace actorlm {

namespace {

void apply_security(const cli::Args& args, RemoteSecurity& s) {
  if (auto v = args.str("--tls-cert")) s.tls_cert = *v;
  if (auto v = args.str("--tls-key")) s.tls_key = *v;
  if (auto v = args.str("--tls-ca")) s.tls_ca = *v;
  if (auto v = args.str("--secret-file")) {
    try {
      s.secret = read_secret_file(*v);
    } catch (const std::exception& e) {
      throw cli::UsageError(std::string("--secret-file: ") + e.what());
    }
  }
  if (args.has(allow_plain_switch)) s.allow_plain_remote = true;
  s.max_message_bytes = static_cast<uint64_t>(
      args.integer("--max-message-bytes", static_cast<int64_t>(s.max_message_bytes), 1 << 16, int64_t{4} << 30));
}

}  // namespace

RemoteSecurity security_from_flags(const cli::Args& args) {
  RemoteSecurity s;
  apply_security(args, s);
  return s;
}

ClusterConfig cluster_from_flags(const cli::Args& args) {
  ClusterConfig c;
  if (auto topology = args.str("--topology")) {
    try {
      c = load_topology(*topology);
    } catch (const std::exception& e) {
      throw cli::UsageError(e.what());
    }
  }
  for (const std::string& n : args.all("--node")) {
    try {
      c.nodes.push_back(parse_node_address(n));
    } catch (const std::invalid_argument& e) {
      throw cli::UsageError(std::string("--node: ") + e.what());
    }
  }
  if (c.nodes.size() > 1024) throw cli::UsageError("at most 1024 nodes");
  if (auto w = args.str("--remote-worker")) {
    try {
      c.remote_worker = parse_node_address(*w);
    } catch (const std::invalid_argument& e) {
      throw cli::UsageError(std::string("--remote-worker: ") + e.what());
    }
  }
  if (!c.remote_worker.host.empty() && !c.nodes.empty()) throw cli::UsageError("--remote-worker and --node exclude each other");
  apply_security(args, c.security);
  c.connect_timeout_s = args.number("--connect-timeout", c.connect_timeout_s, 0, 3600);
  c.failover_attempts = static_cast<int32_t>(args.integer("--failover-attempts", c.failover_attempts, 0, 100));
  c.rebalance_interval_s = args.number("--rebalance-interval", c.rebalance_interval_s, 0, 3600);
  c.rebalance_gap = static_cast<int32_t>(args.integer("--rebalance-gap", c.rebalance_gap, 2, 1 << 20));
  std::vector<NodeAddress> peers = c.nodes;
  if (!c.remote_worker.host.empty()) peers.push_back(c.remote_worker);
  for (const auto& n : peers) {
    if (std::string bad = c.security.check(n.host); !bad.empty()) throw cli::UsageError(n.str() + ": " + bad);
  }
  return c;
}

std::set<std::string> with_flags(std::set<std::string> flags, const std::set<std::string>& more) {
  flags.insert(more.begin(), more.end());
  return flags;
}

}  // namespace actorlm
