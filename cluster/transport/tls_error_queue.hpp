#pragma once
// Keeps one failed TLS connection from failing all the others.
//
// OpenSSL reports why an SSL_read, SSL_write, SSL_accept or SSL_connect
// returned nothing through SSL_get_error, which looks at the calling
// thread's error queue first: any error still queued there, from any earlier
// call, turns an ordinary "would block" into a fatal SSL_ERROR_SSL. OpenSSL's
// manual says the queue must be empty before each such call. CAF 0.17's TLS
// transport (libcaf_openssl, as Debian ships it) never empties it: it runs
// every TLS connection of a process on the middleman's one multiplexer
// thread and drains the queue only while its logger is on. So one
// connection that failed its handshake (a port scan, a peer with a
// certificate from another CA, a peer gone without close_notify) left an
// error there, and the next time any other TLS connection of the process
// ran out of bytes to read it was closed: every link of a node dropped at
// once (a head and its nodes, a prefill node and its decode node).
//
// tls_error_queue.cpp defines those four functions itself; the dynamic
// linker binds libcaf_openssl's calls to an executable's definitions before
// libssl's, and each empties the queue, then calls OpenSSL's.

namespace actorlm {

// True when this process's SSL_read, SSL_write, SSL_accept and SSL_connect
// are the ones above (an executable linked with the cluster transport
// exports them). configure_remote warns when TLS is on and they are not.
bool tls_error_queue_cleared();

}  // namespace actorlm
