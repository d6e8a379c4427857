#pragma once
// A cluster's shape as a head sees it: its nodes or remote worker, how it
// proves who it is (cluster/transport/remote_security.hpp), how it routes,
// and the topology file that says all of that.

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/roles/prefix_router.hpp"
#include "cluster/transport/remote_security.hpp"

namespace actorlm {

struct ClusterConfig {
  std::vector<NodeAddress> nodes;  // engine nodes: empty, the engine runs locally
  // Or one worker node (`actorlm node --role worker`): the scheduler, radix
  // and pool managers stay in this process and drive the node's worker with
  // one ForwardBatch per step. Empty host: none.
  NodeAddress remote_worker;
  RemoteSecurity security;
  double connect_timeout_s = 30;   // the head's constructor waits this long for its nodes
  double retry_interval_s = 1;     // how often a lost node is dialled again
  // How many times one request may move to another node when the node it
  // runs on is lost, going on from the tokens its client already has; 0:
  // it fails with its node (503).
  int32_t failover_attempts = 3;
  // Rebalancing by live migration (cluster/roles/rebalancer.hpp): every
  // interval (0: never), a decoding request moves with its KV from a node
  // that runs at least `rebalance_gap` more requests than another of its kind.
  double rebalance_interval_s = 0;
  int32_t rebalance_gap = 2;
  RouterConfig routing;

  bool remote() const { return !nodes.empty() || !remote_worker.host.empty(); }
};

// A topology file (JSON):
//   {"nodes": ["10.0.0.2:7100", {"address": "10.0.0.3:7100"}],   (or "remote_worker": "10.0.0.2:7100")
//    "tls": {"cert": "head.pem", "key": "head.key", "ca": "ca.pem"},
//    "secret_file": "cluster.secret", "connect_timeout_s": 30, "failover_attempts": 3,
//    "rebalance_interval_s": 0, "rebalance_gap": 2,
//    "routing": {"cache_threshold": 0.5, "balance_abs_threshold": 16, "balance_rel_threshold": 1.5}}
// Relative paths are taken from the file's folder. Throws std::runtime_error
// naming the file and the offending entry.
ClusterConfig load_topology(const std::string& path);

}  // namespace actorlm
