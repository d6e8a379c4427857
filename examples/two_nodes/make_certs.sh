#!/usr/bin/env bash
# A private CA and certificates for one node and one head, for mutual TLS
# between them (see docs/CLUSTER.md). Writes into the folder given (default .).
# Every node and head gets its own key; all are signed by the same CA, and a
# peer with a certificate from any other CA is refused.
set -euo pipefail
out="${1:-.}"
cd "$out"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 365 -subj "/CN=actorlm cluster CA" 2>/dev/null
for name in node head; do
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=actorlm $name" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$name.pem" -days 365 2>/dev/null
  rm "$name.csr"
done
chmod 600 ./*.key
echo "wrote ca.pem, node.pem/node.key, head.pem/head.key in $(pwd)"
