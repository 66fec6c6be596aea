// Blocking TCP with deadlines, for SocketGroup's rendezvous and collectives: every wait is bounded,
// and a peer that closes or stops answering is an error naming it (Note [Collectives]).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace frugal::dist {

using Deadline = std::chrono::steady_clock::time_point;
Deadline deadline_in(double seconds);

// An owned socket descriptor, closed on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
};

// A listening socket on addr:port (port 0: any free one; bound_port() says which).
Socket listen_on(const std::string& addr, int port);
int bound_port(const Socket& s);
// The next connection, or an error naming `what` once `deadline` passes.
Socket accept_before(const Socket& listener, Deadline deadline, const std::string& what);
// Connects to addr:port, retrying until `deadline` while nobody listens yet, the host is not
// reachable yet or its name does not resolve yet (said once on stderr); no connection attempt
// outlasts the deadline (a name lookup waits as long as the resolver's own timeouts).
Socket connect_before(const std::string& addr, int port, Deadline deadline);

// Sends or receives exactly n bytes, or fails once `deadline` passes; `peer` names the other
// side in errors ("rank 1").
void send_all(const Socket& s, const void* data, size_t n, Deadline deadline,
              const std::string& peer);
void recv_all(const Socket& s, void* data, size_t n, Deadline deadline, const std::string& peer);

}  // namespace frugal::dist
