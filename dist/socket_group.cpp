// Note [Reducing through rank 0] in socket_group.h.
#include "dist/socket_group.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "base/error.h"
#include "base/half.h"

namespace frugal::dist {
namespace {

constexpr uint32_t kMagic = 0x4c524746;  // "FGRL"
// The longest message rank 0 sends with a refusal or a failed call; a reply claiming more is not
// rank 0's.
constexpr uint64_t kMaxRefusalBytes = uint64_t{1} << 20;

enum class Kind : uint32_t { hello, all_reduce, broadcast, barrier };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::hello:
      return "hello";
    case Kind::all_reduce:
      return "all_reduce";
    case Kind::broadcast:
      return "broadcast";
    case Kind::barrier:
      return "barrier";
  }
  return "?";
}

// What every rank sends rank 0 before a collective's data (and once as its hello).
struct Header {
  uint32_t magic = kMagic;
  Kind kind = Kind::hello;
  uint32_t op = 0;     // ReduceOp
  uint32_t dtype = 0;  // DType
  int32_t root = 0;    // broadcast's root; hello: the sender's rank
  uint32_t unused = 0;
  uint64_t numel = 0;  // hello: the sender's world size
  uint64_t sequence = 0;
};

// Rank 0's answer: ok (then the data, where that rank receives some) or an error and its text.
struct Reply {
  uint32_t magic = kMagic;
  uint32_t failed = 0;
  uint64_t message_bytes = 0;
};

std::string peer_name(int rank) { return "rank " + std::to_string(rank); }

template <typename Acc, typename Load, typename Store>
void reduce_as(Acc, void* out, const std::vector<const void*>& in, size_t n, ReduceOp op, Load load,
               Store store) {
  std::vector<Acc> acc(n);
  for (size_t i = 0; i < n; ++i) acc[i] = load(in[0], i);
  for (size_t r = 1; r < in.size(); ++r) {  // in rank order: the sum does not depend on arrival
    for (size_t i = 0; i < n; ++i) {
      Acc v = load(in[r], i);
      if (op == ReduceOp::max) {
        if (v > acc[i] || v != v) acc[i] = v;  // a NaN anywhere stays NaN
      } else {
        acc[i] += v;
      }
    }
  }
  if (op == ReduceOp::avg) {
    for (Acc& a : acc) a /= static_cast<Acc>(in.size());
  }
  for (size_t i = 0; i < n; ++i) store(out, i, acc[i]);
}

// The element types that are their own accumulator.
template <typename T>
void reduce_wide(void* out, const std::vector<const void*>& in, size_t n, ReduceOp op) {
  reduce_as(
      T{}, out, in, n, op, [](const void* p, size_t i) { return static_cast<const T*>(p)[i]; },
      [](void* p, size_t i, T v) { static_cast<T*>(p)[i] = v; });
}

// 16-bit floats, accumulated in f32 and rounded once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduce_half(void* out, const std::vector<const void*>& in, size_t n, ReduceOp op) {
  reduce_as(
      float{}, out, in, n, op,
      [](const void* p, size_t i) { return Widen(static_cast<const uint16_t*>(p)[i]); },
      [](void* p, size_t i, float v) { static_cast<uint16_t*>(p)[i] = Narrow(v); });
}

// out = the reduction of the ranks' buffers `in` (rank order), each n elements of `dtype`.
void reduce_buffers(DType dtype, void* out, const std::vector<const void*>& in, size_t n,
                    ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return reduce_wide<float>(out, in, n, op);
    case DType::f64:
      return reduce_wide<double>(out, in, n, op);
    case DType::i64:
      return reduce_wide<int64_t>(out, in, n, op);
    case DType::f16:
      return reduce_half<f16_to_float, float_to_f16>(out, in, n, op);
    case DType::bf16:
      return reduce_half<bf16_to_float, float_to_bf16>(out, in, n, op);
    case DType::u8:
      break;
  }
  FRUGAL_FAIL("SocketGroup: cannot reduce ", dtype, " tensors");
}

// The header of collective number `sequence` over `t` (null for a barrier).
Header header_for(Kind kind, const Tensor* t, uint64_t sequence, ReduceOp op = ReduceOp::sum,
                  int root = 0) {
  Header h;
  h.kind = kind;
  h.op = static_cast<uint32_t>(op);
  h.root = root;
  if (t != nullptr) {
    h.dtype = static_cast<uint32_t>(t->dtype());
    h.numel = static_cast<uint64_t>(t->numel());
  }
  h.sequence = sequence;
  return h;
}

double parse_seconds(const char* name, const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  FRUGAL_CHECK(end != text && *end == '\0' && v > 0, name, "='", text,
               "' is not a positive number of seconds");
  return v;
}

}  // namespace

struct SocketGroup::Call {
  Header header;
  std::string str() const {
    if (header.kind == Kind::barrier) return "barrier";
    std::string s = std::string(kind_name(header.kind)) + " of " + std::to_string(header.numel) +
                    " " + dtype_name(static_cast<DType>(header.dtype)) + " elements";
    if (header.kind == Kind::all_reduce)
      s += " (" + std::string(reduce_op_name(static_cast<ReduceOp>(header.op))) + ")";
    if (header.kind == Kind::broadcast) s += " from rank " + std::to_string(header.root);
    return s + " (collective #" + std::to_string(header.sequence) + ")";
  }
  bool same(const Header& h) const {
    return h.magic == kMagic && h.kind == header.kind && h.op == header.op &&
           h.dtype == header.dtype && h.root == header.root && h.numel == header.numel &&
           h.sequence == header.sequence;
  }
  // Which ranks send rank 0 data, and which get data back.
  bool contributes(int r) const {
    return header.kind == Kind::all_reduce || (header.kind == Kind::broadcast && r == header.root);
  }
  bool receives(int r) const {
    return header.kind == Kind::all_reduce || (header.kind == Kind::broadcast && r != header.root);
  }
};

SocketGroupOptions SocketGroupOptions::from_env() {
  SocketGroupOptions o;
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') o.master_addr = a;
  if (const char* p = std::getenv("MASTER_PORT"); p != nullptr) {
    char* end = nullptr;
    long v = std::strtol(p, &end, 10);
    FRUGAL_CHECK(end != p && *end == '\0' && v > 0 && v <= 65535, "MASTER_PORT='", p,
                 "' is not a port number (1..65535)");
    o.master_port = static_cast<int>(v);
  }
  // torchrun's elastic agent runs its TCPStore on MASTER_PORT and tells the workers to use it as
  // clients (PyTorch's env:// then connects to it); frugal's rendezvous speaks its own protocol,
  // so it takes the next port, the same on every rank.
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
      agent != nullptr && std::string(agent) == "True") {
    FRUGAL_CHECK(o.master_port < 65535, "MASTER_PORT=", o.master_port,
                 " is torchrun's store, and no port follows it for frugal's rendezvous");
    o.master_port += 1;
  }

  if (const char* t = std::getenv("FRUGAL_DIST_TIMEOUT")) {
    o.timeout_seconds = o.rendezvous_timeout_seconds = parse_seconds("FRUGAL_DIST_TIMEOUT", t);
  }
  return o;
}

SocketGroup::SocketGroup(int rank, int size, SocketGroupOptions options)
    : rank_(rank), size_(size), timeout_(options.timeout_seconds) {
  FRUGAL_CHECK(size >= 1 && rank >= 0 && rank < size, "SocketGroup: rank ", rank, " of world size ",
               size, " is impossible");
  FRUGAL_CHECK(timeout_ > 0 && options.rendezvous_timeout_seconds > 0,
               "SocketGroup: timeouts must be positive, got ", timeout_, " and ",
               options.rendezvous_timeout_seconds);
  if (size == 1) return;
  const Deadline deadline = deadline_in(options.rendezvous_timeout_seconds);
  const std::string where = options.master_addr + ":" + std::to_string(options.master_port);
  if (rank != 0) {
    peers_.push_back(connect_before(options.master_addr, options.master_port, deadline));
    Header hello;
    hello.root = rank;
    hello.numel = static_cast<uint64_t>(size);
    send_all(peers_[0], &hello, sizeof hello, deadline, "rank 0 at " + where);
    Reply reply;
    recv_all(peers_[0], &reply, sizeof reply, deadline, "rank 0 at " + where);
    // Checked before its length is trusted: another server on the port (torchrun's store, a web
    // server) answers with bytes whose "length" used to size a string of terabytes.
    FRUGAL_CHECK(reply.magic == kMagic && reply.message_bytes <= kMaxRefusalBytes,
                 "SocketGroup: what answered rank ", rank, " at ", where,
                 " is not a frugal rank 0 (another program holds MASTER_PORT?)");
    std::string message(reply.message_bytes, '\0');
    if (reply.message_bytes > 0)
      recv_all(peers_[0], message.data(), message.size(), deadline, "rank 0");
    FRUGAL_CHECK(reply.magic == kMagic && reply.failed == 0, "SocketGroup: rank 0 at ", where,
                 " refused rank ", rank, ": ", message);
    return;
  }
  // Every interface, as torchrun's store listens: MASTER_ADDR is where the others connect, and
  // bound to its resolved address alone rank 0 listened on 127.0.1.1 where /etc/hosts maps the
  // host's own name there (Debian, Ubuntu), refusing every rank on another node.
  Socket listener = listen_on("0.0.0.0", options.master_port);
  peers_.resize(static_cast<size_t>(size));
  for (int joined = 1; joined < size; ++joined) {
    Socket s = accept_before(listener, deadline,
                             std::to_string(size - joined) + " more of the " +
                                 std::to_string(size - 1) + " other ranks to connect to " + where);
    Header hello;
    recv_all(s, &hello, sizeof hello, deadline, "a connecting rank");
    std::string problem;
    if (hello.magic != kMagic || hello.kind != Kind::hello) {
      problem = "something that is not a frugal rank connected to " + where;
    } else if (static_cast<int64_t>(hello.numel) != size) {
      problem = "rank " + std::to_string(hello.root) + " says the world size is " +
                std::to_string(hello.numel) + ", rank 0 says " + std::to_string(size);
    } else if (hello.root <= 0 || hello.root >= size) {
      problem =
          "a process claimed rank " + std::to_string(hello.root) + " of " + std::to_string(size);
    } else if (peers_[static_cast<size_t>(hello.root)].valid()) {
      problem = "two processes claimed rank " + std::to_string(hello.root);
    }
    Reply reply{kMagic, problem.empty() ? 0u : 1u, problem.size()};
    send_all(s, &reply, sizeof reply, deadline, "a connecting rank");
    if (!problem.empty()) {
      send_all(s, problem.data(), problem.size(), deadline, "a connecting rank");
      FRUGAL_FAIL("SocketGroup: ", problem);
    }
    peers_[static_cast<size_t>(hello.root)] = std::move(s);
  }
}

void SocketGroup::ask(const Call& call, const void* data, size_t bytes) {
  const Deadline deadline = deadline_in(timeout_);
  send_all(peers_[0], &call.header, sizeof call.header, deadline, "rank 0");
  if (call.contributes(rank_) && bytes > 0) send_all(peers_[0], data, bytes, deadline, "rank 0");
}

void SocketGroup::await(const Call& call, void* data, size_t bytes) {
  const Deadline deadline = deadline_in(timeout_);
  Reply reply;
  recv_all(peers_[0], &reply, sizeof reply, deadline, "rank 0");
  FRUGAL_CHECK(reply.magic == kMagic && reply.message_bytes <= kMaxRefusalBytes,
               "SocketGroup (rank ", rank_,
               "): rank 0 answered with bytes that are not a frugal reply");
  if (reply.failed != 0) {
    std::string message(reply.message_bytes, '\0');
    recv_all(peers_[0], message.data(), message.size(), deadline, "rank 0");
    FRUGAL_FAIL("SocketGroup (rank ", rank_, "): ", message);
  }
  if (call.receives(rank_) && bytes > 0) recv_all(peers_[0], data, bytes, deadline, "rank 0");
}

void SocketGroup::collect(const Call& call, void* data, size_t bytes, std::vector<char>* gathered) {
  const Deadline deadline = deadline_in(timeout_);
  for (int r = 1; r < size_; ++r) {
    const Socket& s = peers_[static_cast<size_t>(r)];
    Header h;
    recv_all(s, &h, sizeof h, deadline, peer_name(r));
    if (!call.same(h)) {
      Call theirs{h};
      std::string problem = "rank " + std::to_string(r) + " called " + theirs.str() +
                            " while rank 0 called " + call.str() +
                            "; every rank must make the same collective calls in the same order";
      for (int q = 1; q < size_; ++q) {  // best effort: tell everyone why the job stops
        try {
          Reply reply{kMagic, 1, problem.size()};
          send_all(peers_[static_cast<size_t>(q)], &reply, sizeof reply, deadline, peer_name(q));
          send_all(peers_[static_cast<size_t>(q)], problem.data(), problem.size(), deadline,
                   peer_name(q));
        } catch (const Error&) {
        }
      }
      FRUGAL_FAIL("SocketGroup (rank 0): ", problem);
    }
    if (call.contributes(r) && bytes > 0) {
      if (gathered != nullptr) {
        gathered[r].resize(bytes);
        recv_all(s, gathered[r].data(), bytes, deadline, peer_name(r));
      } else {
        recv_all(s, data, bytes, deadline, peer_name(r));  // broadcast from r
      }
    }
  }
}

void SocketGroup::answer(const Call& call, const void* data, size_t bytes) {
  const Deadline deadline = deadline_in(timeout_);
  for (int r = 1; r < size_; ++r) {
    const Socket& s = peers_[static_cast<size_t>(r)];
    Reply reply;
    send_all(s, &reply, sizeof reply, deadline, peer_name(r));
    if (call.receives(r) && bytes > 0) send_all(s, data, bytes, deadline, peer_name(r));
  }
}

void SocketGroup::all_reduce(Tensor& t, ReduceOp op) {
  check_collective_tensor(*this, "all_reduce", t);
  FRUGAL_CHECK(!(op == ReduceOp::avg && t.dtype() == DType::i64),
               "all_reduce: avg of an i64 tensor would round; reduce with sum and divide");
  if (size_ == 1) {
    return;  // sum, avg and max of one rank's tensor are the tensor
  }
  const Call call{header_for(Kind::all_reduce, &t, ++sequence_, op)};
  const size_t bytes = t.nbytes();
  if (rank_ != 0) {
    ask(call, t.data_ptr(), bytes);
    await(call, t.data_ptr(), bytes);
    return;
  }
  std::vector<std::vector<char>> gathered(static_cast<size_t>(size_));
  collect(call, nullptr, bytes, gathered.data());
  std::vector<const void*> in{t.data_ptr()};
  for (int r = 1; r < size_; ++r) in.push_back(gathered[static_cast<size_t>(r)].data());
  reduce_buffers(t.dtype(), t.data_ptr(), in, static_cast<size_t>(t.numel()), op);
  answer(call, t.data_ptr(), bytes);
}

void SocketGroup::broadcast(Tensor& t, int root) {
  check_collective_tensor(*this, "broadcast", t);
  FRUGAL_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of ", size_);
  if (size_ == 1) return;
  const Call call{header_for(Kind::broadcast, &t, ++sequence_, ReduceOp::sum, root)};
  const size_t bytes = t.nbytes();
  if (rank_ != 0) {
    ask(call, t.data_ptr(), bytes);
    await(call, t.data_ptr(), bytes);
    return;
  }
  collect(call, t.data_ptr(), bytes, nullptr);
  answer(call, t.data_ptr(), bytes);
}

void SocketGroup::broadcast_bytes(void* data, size_t n, int root) {
  Tensor t = Tensor::empty({static_cast<int64_t>(n)}, {.dtype = DType::u8});
  if (rank_ == root) std::memcpy(t.data_ptr(), data, n);
  // u8 moves through broadcast (only all_reduce needs arithmetic).
  broadcast(t, root);
  std::memcpy(data, t.data_ptr(), n);
}

void SocketGroup::barrier() {
  if (size_ == 1) return;
  const Call call{header_for(Kind::barrier, nullptr, ++sequence_)};
  if (rank_ != 0) {
    ask(call, nullptr, 0);
    await(call, nullptr, 0);
    return;
  }
  collect(call, nullptr, 0, nullptr);
  answer(call, nullptr, 0);
}

}  // namespace frugal::dist
