#include "dist/socket_io.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

sockaddr_in resolve(const std::string& addr, int port) {
  FRUGAL_CHECK(port >= 0 && port <= 65535, "socket: port ", port, " is outside 0..65535");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  FRUGAL_CHECK(rc == 0 && found != nullptr, "socket: cannot resolve address '", addr,
               "': ", gai_strerror(rc));
  sockaddr_in sa = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return sa;
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

Socket connect_before(const std::string& addr, int port, Deadline deadline) {
  sockaddr_in sa = resolve(addr, port);
  while (true) {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    FRUGAL_CHECK(s.valid(), "socket: cannot create a socket: ", std::strerror(errno));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      set_no_delay(s.fd());
      return s;
    }
    const int err = errno;
    // Refused: rank 0 is not listening yet (it may start later than this rank).
    FRUGAL_CHECK(err == ECONNREFUSED || err == EINTR || err == ETIMEDOUT || err == ECONNRESET,
                 "socket: cannot connect to ", addr, ":", port, ": ", std::strerror(err));
    FRUGAL_CHECK(Clock::now() < deadline, "socket: nobody listened on ", addr, ":", port,
                 " before the timeout (is rank 0 running, and MASTER_ADDR/MASTER_PORT the same "
                 "on every rank?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
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
