#pragma once
// The flags that make serve and chat a cluster head, and that secure a node:
//   --node HOST:PORT (repeat for each node) or --topology FILE.json
//   --remote-worker HOST:PORT                   drive one worker node's worker
//   --tls-cert PEM --tls-key PEM --tls-ca PEM   mutual TLS
//   --secret-file FILE                          shared secret
//   --allow-plain-remote                        plain TCP beyond loopback
//   --max-message-bytes N                       largest CAF message a peer may announce
//   --connect-timeout S                         head: wait for the nodes
//   --failover-attempts N                       head: moves of a request whose node is lost (0: it fails)
//   --rebalance-interval S --rebalance-gap N    head: move decoding requests from busy nodes to idle ones

#include <set>
#include <string>

#include "apps/cli_args.hpp"
#include "cluster/roles/cluster_config.hpp"

namespace actorlm {

inline const std::set<std::string> security_flags{"--tls-cert", "--tls-key", "--tls-ca", "--secret-file",
                                                  "--max-message-bytes"};
inline const std::set<std::string> head_flags{"--node", "--topology", "--connect-timeout", "--failover-attempts",
                                              "--remote-worker", "--rebalance-interval", "--rebalance-gap"};
inline const char* const allow_plain_switch = "--allow-plain-remote";

// The security flags alone (a node).
RemoteSecurity security_from_flags(const cli::Args& args);
// A head's cluster: no nodes when none of --node, --remote-worker, --topology is given.
// Flags override what the topology file says.
ClusterConfig cluster_from_flags(const cli::Args& args);

std::set<std::string> with_flags(std::set<std::string> flags, const std::set<std::string>& more);

}  // namespace actorlm
