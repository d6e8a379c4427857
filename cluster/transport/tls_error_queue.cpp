#include "cluster/transport/tls_error_queue.hpp"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdio>
#include <cstdlib>

namespace {

// OpenSSL's own definition of `name`: the next one after this object's in
// the dynamic linker's lookup order.
template <class Fn>
Fn openssl_function(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "actorlm: %s not found in libssl: %s\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

// `next`, to be called once this thread's error queue is empty.
template <class Fn>
Fn after_clearing(Fn next) {
  ERR_clear_error();
  return next;
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto next = openssl_function<int (*)(SSL*, void*, int)>("SSL_read");
  return after_clearing(next)(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto next = openssl_function<int (*)(SSL*, const void*, int)>("SSL_write");
  return after_clearing(next)(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static const auto next = openssl_function<int (*)(SSL*)>("SSL_accept");
  return after_clearing(next)(ssl);
}

int SSL_connect(SSL* ssl) {
  static const auto next = openssl_function<int (*)(SSL*)>("SSL_connect");
  return after_clearing(next)(ssl);
}

}  // extern "C"

namespace actorlm {

bool tls_error_queue_cleared() {
  // What a call from libcaf_openssl would reach.
  return dlsym(RTLD_DEFAULT, "SSL_read") == reinterpret_cast<void*>(&SSL_read) &&
         dlsym(RTLD_DEFAULT, "SSL_write") == reinterpret_cast<void*>(&SSL_write) &&
         dlsym(RTLD_DEFAULT, "SSL_accept") == reinterpret_cast<void*>(&SSL_accept) &&
         dlsym(RTLD_DEFAULT, "SSL_connect") == reinterpret_cast<void*>(&SSL_connect);
}

}  // namespace actorlm
