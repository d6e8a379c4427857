#include "cluster/transport/tcp_socket.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace actorlm {

void set_socket_options(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return std::string(host) + ":" + serv;
}

// A nonblocking socket connecting (or bound, listening) to host:port; -1 and `error` on failure.
int open_socket(const std::string& host, uint16_t port, bool listen, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (listen ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    error = host + ": " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    bool ok;
    if (listen) {
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      ok = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0;
    } else {
      ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS;
    }
    if (!ok) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) set_socket_options(fd);
  return fd;
}

namespace {

uint16_t port_of(const sockaddr_storage& ss) {
  return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
}

// The inode of the socket in `table` (/proc/self/net/tcp or tcp6) whose local
// port is `local` and remote port is `remote`; 0 when none.
unsigned long socket_inode(const char* table, uint16_t local, uint16_t remote) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string slot, local_addr, remote_addr, skip;
    f >> slot >> local_addr >> remote_addr;
    for (int i = 0; i < 6; ++i) f >> skip;  // st, queues, tr, retrnsmt, uid, timeout
    unsigned long inode = 0;
    f >> inode;
    auto port = [](const std::string& a) {
      auto colon = a.rfind(':');
      return colon == std::string::npos ? 0 : static_cast<uint16_t>(std::stoul(a.substr(colon + 1), nullptr, 16));
    };
    if (port(local_addr) == local && port(remote_addr) == remote) return inode;
  }
  return 0;
}

}  // namespace

bool peer_is_this_process(int fd) {
  sockaddr_storage peer{}, me{};
  socklen_t plen = sizeof peer, mlen = sizeof me;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &mlen) != 0) {
    return false;
  }
  const uint16_t their_port = port_of(peer), my_port = port_of(me);
  unsigned long inode = socket_inode("/proc/self/net/tcp", their_port, my_port);
  if (inode == 0) inode = socket_inode("/proc/self/net/tcp6", their_port, my_port);
  if (inode == 0) return false;
  const std::string wanted = "socket:[" + std::to_string(inode) + "]";
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return false;
  bool found = false;
  while (dirent* e = ::readdir(dir)) {
    char target[64];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n > 0 && std::string(target, static_cast<size_t>(n)) == wanted) {
      found = true;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace actorlm
