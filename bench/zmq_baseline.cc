// zmq_baseline: what raw ZeroMQ moves between two processes on this machine,
// the limit Ember's KV benchmark (bench/kv_bench) is compared with.
//
//   zmq_baseline [--sizes=4096,12000,262144,4194304] [--windows=8,1]
//                [--directions=push] [--seconds=2] [--warmup_seconds=0.5]
//                [--replies=same] [--spin_us=0] [--server_sums]
//
// The program forks before any ZeroMQ context exists. The child is the
// server: a ROUTER bound to tcp://127.0.0.1:* (a port the kernel picks,
// passed to the parent through a pipe). The parent is the client: a DEALER
// connected to it, as Ember's transport connects a node to its peers. For
// every direction x size x window it keeps `window` messages in flight for
// --warmup_seconds, then for --seconds, waiting for the oldest answer
// whenever the window is full:
//   push: the client sends `size` bytes, zero-copy (zmq_msg_init_data over
//         one preallocated buffer, no-op free); the server answers 8 bytes,
//         as a server acknowledges a push.
//   pull: the client sends a 16-byte request; the server answers `size`
//         bytes, zero-copy from its own preallocated buffer.
// Window 1 is a round trip ("a 4 KB push waited for before the next").
// --replies=separate sends the answers over a second TCP connection, as an
// Ember node answers (its DEALER to the client's own ROUTER), instead of back
// over the request's connection: the difference between the two runs is what
// that topology costs raw ZeroMQ (the answers cannot carry the requests'
// TCP acknowledgements, and the other way round).
// --spin_us=N makes both sides wait as an Ember node's waiting threads do
// (EMBER_SPIN_US): a receive is tried without blocking, yielding the CPU
// between tries, for up to N us before it blocks. The default, 0, blocks at
// once, which is how the targets' baseline was measured.
// --server_sums makes the server add every pushed payload, as floats, into
// a store of its own before it answers: the arithmetic of kv_bench's summing
// handle (bench/add_to.h), so that Ember with that handle can also be
// compared with raw ZeroMQ doing the same work. Without it nobody reads or
// copies the payload: this is the transport's limit.
// glibc's malloc gets the settings an Ember node gives it (see
// --malloc_keep_mb), since ZeroMQ mallocs every message it receives.
//
// Output, one line per case:
//   RESULT baseline=zmq size=4194304 window=8 GB_s=2.97 msgs_s=708.1
//          p50_us=11200 p99_us=13100 direction=push replies=same
//          spin_us=0 server_sums=0 (one line)
// GB = 1e9 bytes of payload; latency runs from a message's send to the
// arrival of its answer.
//
// Wire protocol, client to server, one frame: 0 bytes ends the server; 16
// bytes {u64 sequence, u64 size} asks for `size` bytes back; anything else
// is a push, acknowledged with 8 bytes. Push sizes must therefore exceed 16.
#include <gflags/gflags.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "add_to.h"
#include "util/malloc_tuning.h"

DEFINE_string(sizes, "4096,12000,262144,4194304",
              "payload sizes in bytes, comma-separated");
DEFINE_string(windows, "8,1", "messages in flight, comma-separated");
DEFINE_string(directions, "push",
              "push (payload to the server, small ack back) and/or pull "
              "(small request, payload back), comma-separated");
DEFINE_double(seconds, 2, "measured duration per case, in seconds");
DEFINE_double(warmup_seconds, 0.5, "unmeasured run before each case");
DEFINE_string(replies, "same",
              "same: answers come back over the request's connection; "
              "separate: over a second connection, from a DEALER of the "
              "server's to a ROUTER of the client's (Ember's topology)");
DEFINE_bool(server_sums, false,
            "the server adds every pushed payload, as floats, into a store "
            "of its own (kv_bench's summing handle's arithmetic) before it "
            "answers; pull answers are unchanged");
DEFINE_int32(spin_us, 0,
             "before blocking in a receive, try it without blocking for up "
             "to this long, yielding the CPU between tries, as an Ember "
             "node waits (EMBER_SPIN_US); 0 blocks at once");
DEFINE_int32(timeout_ms, 10000,
             "give up when a peer stays silent this long (milliseconds)");
DEFINE_int32(
    malloc_keep_mb, 256,
    "tune glibc's malloc as an Ember node does (EMBER_MALLOC_KEEP_MB): "
    "allocations up to 32 MiB from the heap, this much freed memory "
    "kept; 0 leaves malloc's defaults");

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kPullRequestBytes = 16;
constexpr size_t kAckBytes = 8;

// ZeroMQ never frees the send buffers: they live until the process ends.
void NoFree(void*, void*) {}

bool ParseList(const std::string& text, std::vector<std::string>* out) {
  out->clear();
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    if (end == begin) return false;
    out->push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return !out->empty();
}

bool ParseNumbers(const std::string& text, std::vector<size_t>* out) {
  std::vector<std::string> items;
  if (!ParseList(text, &items)) return false;
  out->clear();
  for (const std::string& item : items) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (errno != 0 || end == item.c_str() || *end != '\0' || v == 0) {
      return false;
    }
    out->push_back(static_cast<size_t>(v));
  }
  return true;
}

void ZmqError(const char* what) {
  std::fprintf(stderr, "zmq_baseline: %s: %s\n", what, zmq_strerror(errno));
}

// A socket with linger 0 and a receive deadline of --timeout_ms.
void* MakeSocket(void* context, int type) {
  void* socket = zmq_socket(context, type);
  if (socket == nullptr) return nullptr;
  const int linger = 0;
  const int timeout = FLAGS_timeout_ms;
  zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
  return socket;
}

// zmq_msg_recv, blocking, after up to --spin_us of non-blocking tries.
int ReceiveMsg(zmq_msg_t* msg, void* socket) {
  if (FLAGS_spin_us > 0) {
    const Clock::time_point until =
        Clock::now() + std::chrono::microseconds(FLAGS_spin_us);
    do {
      const int rc = zmq_msg_recv(msg, socket, ZMQ_DONTWAIT);
      if (rc >= 0 || errno != EAGAIN) return rc;
      sched_yield();
    } while (Clock::now() < until);
  }
  return zmq_msg_recv(msg, socket, 0);
}

// ---------------------------------------------------------------- server --

// Reads a port from `fd`, waiting at most --timeout_ms.
std::string ReadPort(int fd) {
  pollfd item{fd, POLLIN, 0};
  if (poll(&item, 1, FLAGS_timeout_ms) <= 0) return "";
  char buf[16] = {};
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// Binds a socket of `type` to 127.0.0.1 on a port the kernel picks and
// writes that port to `port_fd`; nullptr on failure (reported).
void* BindAndPublish(void* context, int type, int port_fd) {
  void* socket = MakeSocket(context, type);
  if (socket == nullptr || zmq_bind(socket, "tcp://127.0.0.1:*") != 0) {
    ZmqError("bind");
    return nullptr;
  }
  char endpoint[256];
  size_t endpoint_size = sizeof(endpoint);
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, endpoint, &endpoint_size) !=
      0) {
    ZmqError("ZMQ_LAST_ENDPOINT");
    return nullptr;
  }
  const char* colon = std::strrchr(endpoint, ':');
  const std::string port = colon != nullptr ? colon + 1 : "";
  if (port.empty() || write(port_fd, port.data(), port.size()) !=
                          static_cast<ssize_t>(port.size())) {
    std::fprintf(stderr, "zmq_baseline: cannot publish the port\n");
    return nullptr;
  }
  close(port_fd);
  return socket;
}

// Binds, writes its port to `port_fd`, and answers until told to stop: over
// the request's connection, or (when `reply_port_fd` >= 0, --replies=
// separate) from a DEALER connected to the port the client writes there.
// Returns the process's exit status.
int Serve(int port_fd, int reply_port_fd, size_t max_size) {
  // The payload of pull answers: allocated and touched once.
  std::vector<char> payload(max_size, 'x');
  // --server_sums: what pushed payloads are added into.
  std::vector<float> store(FLAGS_server_sums ? max_size / sizeof(float) : 0);
  void* context = zmq_ctx_new();
  void* socket = BindAndPublish(context, ZMQ_ROUTER, port_fd);
  if (socket == nullptr) return 1;
  // Where answers go: the ROUTER itself (identity frame first) or a DEALER.
  void* out = socket;
  if (reply_port_fd >= 0) {
    const std::string reply_port = ReadPort(reply_port_fd);
    close(reply_port_fd);
    out = MakeSocket(context, ZMQ_DEALER);
    const std::string endpoint = "tcp://127.0.0.1:" + reply_port;
    if (reply_port.empty() || out == nullptr ||
        zmq_connect(out, endpoint.c_str()) != 0) {
      ZmqError("server connect for answers");
      return 1;
    }
  }

  int status = 0;
  uint64_t received = 0;
  zmq_msg_t identity, body;
  zmq_msg_init(&identity);
  zmq_msg_init(&body);
  while (true) {
    if (ReceiveMsg(&identity, socket) < 0 ||
        zmq_msg_recv(&body, socket, 0) < 0) {
      ZmqError("server receive");
      status = 1;
      break;
    }
    const size_t size = zmq_msg_size(&body);
    if (size == 0) break;
    ++received;
    // Sending consumes the identity message and leaves it empty.
    if (out == socket && zmq_msg_send(&identity, socket, ZMQ_SNDMORE) < 0) {
      ZmqError("server send");
      status = 1;
      break;
    }
    int rc;
    if (size == kPullRequestBytes) {
      uint64_t request[2];
      std::memcpy(request, zmq_msg_data(&body), sizeof(request));
      const size_t want = std::min<uint64_t>(request[1], max_size);
      zmq_msg_t reply;
      zmq_msg_init_data(&reply, payload.data(), want, NoFree, nullptr);
      rc = zmq_msg_send(&reply, out, 0);
      if (rc < 0) zmq_msg_close(&reply);
    } else {
      if (FLAGS_server_sums) {
        AddTo(store.data(), static_cast<const float*>(zmq_msg_data(&body)),
              std::min(size / sizeof(float), store.size()));
        // The store is never read: keep the compiler from dropping the adds.
        asm volatile("" : : "r"(store.data()) : "memory");
      }
      rc = zmq_send(out, &received, kAckBytes, 0);
    }
    if (rc < 0) {
      ZmqError("server send");
      status = 1;
      break;
    }
  }
  zmq_msg_close(&identity);
  zmq_msg_close(&body);
  if (out != socket) zmq_close(out);
  zmq_close(socket);
  zmq_ctx_term(context);
  return status;
}

// ---------------------------------------------------------------- client --

struct CaseResult {
  uint64_t messages = 0;
  double seconds = 0;
  std::vector<int64_t> latencies_ns;
};

class Client {
 public:
  // Sends on `socket`; answers arrive on `replies` (the same socket, or a
  // ROUTER whose messages carry an identity frame first).
  Client(void* socket, void* replies, const char* payload)
      : socket_(socket), replies_(replies), payload_(payload) {
    zmq_msg_init(&reply_);
  }
  ~Client() { zmq_msg_close(&reply_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Keeps `window` messages in flight for `seconds`, then drains them.
  bool Run(bool push, size_t size, size_t window, double seconds, bool record,
           CaseResult* result) {
    std::vector<Clock::time_point> sent(window);
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline =
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(seconds));
    Clock::time_point last_done = start;
    uint64_t next = 0, oldest = 0;
    auto complete = [&]() {
      if (!Receive(push ? kAckBytes : size)) return false;
      last_done = Clock::now();
      if (record) {
        result->latencies_ns.push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(
                last_done - sent[oldest % window])
                .count());
      }
      ++oldest;
      return true;
    };
    while (Clock::now() < deadline) {
      if (next - oldest == window && !complete()) return false;
      sent[next % window] = Clock::now();
      if (!Send(push, size, next)) return false;
      ++next;
    }
    while (oldest < next) {
      if (!complete()) return false;
    }
    result->messages = next;
    result->seconds = std::chrono::duration<double>(last_done - start).count();
    return true;
  }

  bool Stop() { return zmq_send(socket_, "", 0, 0) == 0; }

 private:
  bool Send(bool push, size_t size, uint64_t sequence) {
    if (!push) {
      const uint64_t request[2] = {sequence, size};
      if (zmq_send(socket_, request, sizeof(request), 0) < 0) {
        ZmqError("client send");
        return false;
      }
      return true;
    }
    zmq_msg_t message;
    zmq_msg_init_data(&message, const_cast<char*>(payload_), size, NoFree,
                      nullptr);
    if (zmq_msg_send(&message, socket_, 0) < 0) {
      zmq_msg_close(&message);
      ZmqError("client send");
      return false;
    }
    return true;
  }

  bool Receive(size_t expected) {
    // An answer's first frame is waited for (--spin_us); on a separate
    // ROUTER that is the identity, and the body arrived with it.
    const bool identity = replies_ != socket_;
    if (ReceiveMsg(&reply_, replies_) < 0 ||
        (identity && zmq_msg_recv(&reply_, replies_, 0) < 0)) {
      ZmqError("client receive");
      return false;
    }
    if (zmq_msg_size(&reply_) != expected) {
      std::fprintf(stderr, "zmq_baseline: answer of %zu bytes, expected %zu\n",
                   zmq_msg_size(&reply_), expected);
      return false;
    }
    return true;
  }

  void* const socket_;
  void* const replies_;
  const char* const payload_;
  zmq_msg_t reply_;
};

double Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1e3;
}

int RunClient(int port_fd, int reply_port_fd,
              const std::vector<std::string>& directions,
              const std::vector<size_t>& sizes,
              const std::vector<size_t>& windows) {
  const std::string port = ReadPort(port_fd);
  close(port_fd);
  if (port.empty()) {
    std::fprintf(stderr, "zmq_baseline: the server did not publish a port\n");
    return 1;
  }
  std::vector<char> payload(*std::max_element(sizes.begin(), sizes.end()), 'x');
  void* context = zmq_ctx_new();
  void* socket = MakeSocket(context, ZMQ_DEALER);
  const std::string endpoint = "tcp://127.0.0.1:" + port;
  if (socket == nullptr || zmq_connect(socket, endpoint.c_str()) != 0) {
    ZmqError("client connect");
    return 1;
  }
  void* replies = socket;
  if (reply_port_fd >= 0) {
    replies = BindAndPublish(context, ZMQ_ROUTER, reply_port_fd);
    if (replies == nullptr) return 1;
  }
  int major = 0, minor = 0, patch = 0;
  zmq_version(&major, &minor, &patch);
  std::printf(
      "# zmq %d.%d.%d, DEALER -> ROUTER over %s, answers %s, "
      "2 processes\n",
      major, minor, patch, endpoint.c_str(),
      replies == socket ? "over the same connection"
                        : "from a DEALER to the client's ROUTER");
  std::fflush(stdout);

  int status = 0;
  {
    Client client(socket, replies, payload.data());
    for (const std::string& direction : directions) {
      const bool push = direction == "push";
      for (size_t size : sizes) {
        for (size_t window : windows) {
          CaseResult warmup, measured;
          measured.latencies_ns.reserve(size_t{1} << 20);
          if (!client.Run(push, size, window, FLAGS_warmup_seconds, false,
                          &warmup) ||
              !client.Run(push, size, window, FLAGS_seconds, true, &measured)) {
            status = 1;
            break;
          }
          std::vector<int64_t>& lat = measured.latencies_ns;
          std::sort(lat.begin(), lat.end());
          const double seconds = std::max(measured.seconds, 1e-9);
          const double messages = static_cast<double>(measured.messages);
          std::printf(
              "RESULT baseline=zmq size=%zu window=%zu GB_s=%.3f "
              "msgs_s=%.1f p50_us=%.1f p99_us=%.1f direction=%s "
              "replies=%s spin_us=%d server_sums=%d\n",
              size, window,
              messages * static_cast<double>(size) / seconds / 1e9,
              messages / seconds, Percentile(lat, 0.50), Percentile(lat, 0.99),
              direction.c_str(), FLAGS_replies.c_str(), FLAGS_spin_us,
              FLAGS_server_sums ? 1 : 0);
          std::fflush(stdout);
        }
        if (status != 0) break;
      }
      if (status != 0) break;
    }
    if (status == 0 && !client.Stop()) {
      ZmqError("client stop");
      status = 1;
    }
  }
  if (replies != socket) zmq_close(replies);
  zmq_close(socket);
  zmq_ctx_term(context);
  return status;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::SetUsageMessage(
      "raw ZeroMQ throughput and latency between two local processes");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  // Before the fork, so both processes have it. Without it every received
  // multi-megabyte message is a fresh mapping the kernel faults in; the
  // comparison with Ember is only fair with the same allocator settings.
  ps::TuneMallocForLargeMessages(FLAGS_malloc_keep_mb);
  std::vector<size_t> sizes, windows;
  std::vector<std::string> directions;
  if (!ParseNumbers(FLAGS_sizes, &sizes) ||
      !ParseNumbers(FLAGS_windows, &windows) ||
      !ParseList(FLAGS_directions, &directions)) {
    std::fprintf(stderr,
                 "zmq_baseline: bad --sizes, --windows or "
                 "--directions\n");
    return 2;
  }
  for (const std::string& d : directions) {
    if (d != "push" && d != "pull") {
      std::fprintf(stderr, "zmq_baseline: unknown direction %s\n", d.c_str());
      return 2;
    }
  }
  for (size_t size : sizes) {
    if (size <= kPullRequestBytes) {
      std::fprintf(stderr, "zmq_baseline: sizes must exceed %zu bytes\n",
                   kPullRequestBytes);
      return 2;
    }
  }
  if (FLAGS_replies != "same" && FLAGS_replies != "separate") {
    std::fprintf(stderr, "zmq_baseline: --replies must be same or separate\n");
    return 2;
  }
  if (FLAGS_spin_us < 0 || FLAGS_spin_us > 1000000) {
    std::fprintf(stderr, "zmq_baseline: --spin_us must be in [0, 1000000]\n");
    return 2;
  }
  if (!(FLAGS_seconds > 0) || FLAGS_warmup_seconds < 0 ||
      FLAGS_timeout_ms <= 0) {
    std::fprintf(stderr,
                 "zmq_baseline: bad --seconds, --warmup_seconds or "
                 "--timeout_ms\n");
    return 2;
  }
  const size_t max_size = *std::max_element(sizes.begin(), sizes.end());

  // The server's port, to the client; with --replies=separate, the port of
  // the client's ROUTER, to the server.
  int pipe_fds[2], reply_fds[2] = {-1, -1};
  if (pipe(pipe_fds) != 0 ||
      (FLAGS_replies == "separate" && pipe(reply_fds) != 0)) {
    std::perror("zmq_baseline: pipe");
    return 1;
  }
  std::fflush(stdout);
  const pid_t parent = getpid();
  // Fork before any ZeroMQ context exists: a context does not survive fork.
  const pid_t child = fork();
  if (child < 0) {
    std::perror("zmq_baseline: fork");
    return 1;
  }
  if (child == 0) {
    close(pipe_fds[0]);
    if (reply_fds[1] >= 0) close(reply_fds[1]);
    // The server must not outlive the client.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    _exit(Serve(pipe_fds[1], reply_fds[0], max_size));
  }
  close(pipe_fds[1]);
  if (reply_fds[0] >= 0) close(reply_fds[0]);
  int status = RunClient(pipe_fds[0], reply_fds[1], directions, sizes, windows);
  if (status != 0) kill(child, SIGKILL);
  int child_status = 0;
  if (waitpid(child, &child_status, 0) != child || !WIFEXITED(child_status) ||
      WEXITSTATUS(child_status) != 0) {
    if (status == 0) {
      std::fprintf(stderr, "zmq_baseline: the server failed\n");
    }
    status = 1;
  }
  return status;
}
