#!/usr/bin/env bash
# Two worker nodes and a head on one machine, as docs/CLUSTER.md walks through
# them: each node on its own port (pin them to separate cores with taskset,
# or run them on two machines with TLS), the head serving the OpenAI API.
#
#   bash examples/two_nodes/two_nodes.sh [path/to/actorlm] [--tls]
#
# Asks one question, prints the answer and the per-node view, and stops
# everything it started.
set -euo pipefail
actorlm="${1:-$(command -v actorlm || echo build/apps/actorlm)}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

if [[ "${2:-}" == "--tls" ]]; then
  bash "$here/make_certs.sh" "$work" >/dev/null
  node_security=(--tls-cert "$work/node.pem" --tls-key "$work/node.key" --tls-ca "$work/ca.pem")
  head_security=(--tls-cert "$work/head.pem" --tls-key "$work/head.key" --tls-ca "$work/ca.pem")
else
  # A shared secret: every node and head of the cluster reads the same file.
  head -c 32 /dev/urandom | base64 > "$work/cluster.secret"
  chmod 600 "$work/cluster.secret"
  node_security=(--secret-file "$work/cluster.secret")
  head_security=(--secret-file "$work/cluster.secret")
fi

# Node 1 and node 2 (each: the model, its own KV pool and radix cache).
"$actorlm" node --port 7101 --threads 1 "${node_security[@]}" 2> "$work/node1.log" & pids+=($!)
"$actorlm" node --port 7102 --threads 1 "${node_security[@]}" 2> "$work/node2.log" & pids+=($!)
for log in node1 node2; do
  for _ in $(seq 600); do grep -q "listening on" "$work/$log.log" && break; sleep 0.1; done
  grep "listening on" "$work/$log.log" || { cat "$work/$log.log"; exit 1; }
done

# The head: tokenizes, routes each request to the node with the longest
# cached prefix, and serves http://127.0.0.1:30100.
"$actorlm" serve --port 30100 --node 127.0.0.1:7101 --node 127.0.0.1:7102 "${head_security[@]}" 2> "$work/head.log" &
pids+=($!)
for _ in $(seq 600); do curl -sf http://127.0.0.1:30100/health >/dev/null && break; sleep 0.1; done

curl -s http://127.0.0.1:30100/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Name the capital of France."}], "max_tokens": 24, "temperature": 0}'
echo
curl -s http://127.0.0.1:30100/nodes
echo
