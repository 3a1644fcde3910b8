// HttpServer: serves a Registry over HTTP for Prometheus (GET /metrics, text
// format 0.0.4) and, where the owner supplies one, a JSON document at
// GET /status. Built on cpp-httplib (Debian's libcpp-httplib-dev): a
// maintained, small embedded server that Debian builds as a shared library,
// so Ember writes no HTTP parsing of its own; one worker thread is enough for
// a scraper or two.
//
// Start/Stop lifecycle; Stop is idempotent and the destructor calls it.
// Handlers run on the server's own thread. Thread-safe.
#ifndef PS_METRICS_HTTP_SERVER_H_
#define PS_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "metrics/metrics.h"

namespace httplib {
class Server;
}

namespace ps {
namespace metrics {

class HttpServer {
 public:
  // `registry` is borrowed and must outlive the server. `status`, if set,
  // answers GET /status (a JSON document).
  HttpServer(const Registry* registry, std::function<std::string()> status);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (0: an ephemeral port) and starts serving. Returns the
  // bound port, or -1 (with *error set) if it cannot bind.
  int Start(const std::string& host, int port, std::string* error);
  void Stop();

 private:
  const Registry* const registry_;
  const std::function<std::string()> status_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace metrics
}  // namespace ps

#endif  // PS_METRICS_HTTP_SERVER_H_
