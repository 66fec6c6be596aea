#include "dist/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "base/error.h"

namespace frugal::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left before `deadline`, at least 0, at most a minute per poll.
int millis_left(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
}

// Waits until `fd` is readable (POLLIN) or writable (POLLOUT); false once the deadline passed.
bool wait_for(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, millis_left(deadline));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) FRUGAL_FAIL("socket: poll failed: ", std::strerror(errno));
    if (Clock::now() >= deadline) return false;
  }
}

// addr:port, or nothing with `why` set: a cluster's host names may appear after a job starts, so
// connect_before asks again.
std::optional<sockaddr_in> try_resolve(const std::string& addr, int port, std::string& why) {
  FRUGAL_CHECK(port >= 0 && port <= 65535, "socket: port ", port, " is outside 0..65535");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    why = detail::str("cannot resolve address '", addr, "': ", gai_strerror(rc));
    return std::nullopt;
  }
  sockaddr_in sa = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return sa;
}

sockaddr_in resolve(const std::string& addr, int port) {
  std::string why;
  std::optional<sockaddr_in> sa = try_resolve(addr, port, why);
  FRUGAL_CHECK(sa.has_value(), "socket: ", why);
  return *sa;
}

void set_no_delay(int fd) {
  int one = 1;  // collectives are request/answer: Nagle's delay would stall every one
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Deadline deadline_in(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket listen_on(const std::string& addr, int port) {
  sockaddr_in sa = resolve(addr, port);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  FRUGAL_CHECK(s.valid(), "socket: cannot create a socket: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  FRUGAL_CHECK(::bind(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0,
               "socket: cannot listen on ", addr, ":", port, ": ", std::strerror(errno),
               " (MASTER_PORT taken by another job?)");
  FRUGAL_CHECK(::listen(s.fd(), 128) == 0, "socket: listen on ", addr, ":", port,
               " failed: ", std::strerror(errno));
  return s;
}

int bound_port(const Socket& s) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  FRUGAL_CHECK(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len) == 0,
               "socket: getsockname failed: ", std::strerror(errno));
  return ntohs(sa.sin_port);
}

Socket accept_before(const Socket& listener, Deadline deadline, const std::string& what) {
  FRUGAL_CHECK(wait_for(listener.fd(), POLLIN, deadline), "socket: timed out waiting for ", what);
  Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  FRUGAL_CHECK(s.valid(), "socket: accept failed: ", std::strerror(errno));
  set_no_delay(s.fd());
  return s;
}

namespace {

// Errors after which rank 0 may still come: not listening yet (refused, reset), or its host or
// network not reachable yet (a node that is still starting).
bool worth_retrying(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == EINTR || err == ETIMEDOUT ||
         err == EHOSTUNREACH || err == ENETUNREACH || err == EAGAIN;
}

// One attempt, waiting no longer than `deadline`: a blocking connect to a host that drops the
// SYN would wait the kernel's ~2 minutes whatever the deadline. An invalid socket and `why` set
// when it may be tried again.
Socket try_connect(const sockaddr_in& sa, const std::string& where, Deadline deadline,
                   std::string& why) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  FRUGAL_CHECK(s.valid(), "socket: cannot create a socket: ", std::strerror(errno));
  int err = ::connect(s.fd(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    if (!wait_for(s.fd(), POLLOUT, deadline)) {
      why = "no answer from " + where;
      return {};
    }
    socklen_t len = sizeof err;
    FRUGAL_CHECK(::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len) == 0,
                 "socket: getsockopt failed: ", std::strerror(errno));
  }
  if (err == 0) {
    // Blocking again: sends and receives wait in poll (wait_for) with their own deadlines.
    const int flags = ::fcntl(s.fd(), F_GETFL);
    FRUGAL_CHECK(flags >= 0 && ::fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK) == 0,
                 "socket: fcntl failed: ", std::strerror(errno));
    set_no_delay(s.fd());
    return s;
  }
  FRUGAL_CHECK(worth_retrying(err), "socket: cannot connect to ", where, ": ", std::strerror(err));
  why = detail::str("connecting to ", where, ": ", std::strerror(err));
  return {};
}

}  // namespace

Socket connect_before(const std::string& addr, int port, Deadline deadline) {
  const std::string where = addr + ":" + std::to_string(port);
  std::string why;  // the last attempt's failure
  bool said = false;
  auto pause = std::chrono::milliseconds(20);
  while (true) {
    if (std::optional<sockaddr_in> sa = try_resolve(addr, port, why)) {
      Socket s = try_connect(*sa, where, deadline, why);
      if (s.valid()) return s;
    } else if (!said) {
      // Said once, as PyTorch's store client does: a mistyped MASTER_ADDR would otherwise wait
      // out the whole rendezvous timeout in silence.
      std::fprintf(stderr, "socket: %s; trying again until the rendezvous timeout\n", why.c_str());
      said = true;
    }
    FRUGAL_CHECK(Clock::now() < deadline, "socket: nobody listened on ", where,
                 " before the timeout (is rank 0 running, and MASTER_ADDR/MASTER_PORT the same "
                 "on every rank?); the last attempt: ",
                 why);
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

void send_all(const Socket& s, const void* data, size_t n, Deadline deadline,
              const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // A peer that is alive but not reading (stuck, stopped) fills the socket's buffer: the send
    // waits for room until the deadline, as a receive waits for data, instead of for ever.
    FRUGAL_CHECK(wait_for(s.fd(), POLLOUT, deadline), "socket: ", peer,
                 " took no data before the timeout (is it stuck or stopped?)");
    // A closed peer is an error, not SIGPIPE; no wait inside send, the poll above does it.
    ssize_t k = ::send(s.fd(), p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    FRUGAL_CHECK(k > 0, "socket: sending to ", peer, " failed: ", std::strerror(errno), " (did ",
                 peer, " exit?)");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void recv_all(const Socket& s, void* data, size_t n, Deadline deadline, const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    FRUGAL_CHECK(wait_for(s.fd(), POLLIN, deadline), "socket: ", peer,
                 " did not answer before the timeout");
    ssize_t k = ::recv(s.fd(), p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    FRUGAL_CHECK(k != 0, "socket: ", peer, " closed its connection (did it exit?)");
    FRUGAL_CHECK(k > 0, "socket: receiving from ", peer, " failed: ", std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

}  // namespace frugal::dist
