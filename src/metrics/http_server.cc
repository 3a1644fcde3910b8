#include "metrics/http_server.h"

#include <httplib.h>

namespace ps {
namespace metrics {

HttpServer::HttpServer(const Registry* registry,
                       std::function<std::string()> status)
    : registry_(registry), status_(std::move(status)) {}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::Start(const std::string& host, int port, std::string* error) {
  server_ = std::make_unique<httplib::Server>();
  server_->new_task_queue = [] { return new httplib::ThreadPool(1); };
  // A scraper that stops reading must not hold the one worker for long.
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);
  server_->set_keep_alive_timeout(5);
  server_->Get(
      "/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(registry_->Text(), "text/plain; version=0.0.4");
      });
  if (status_) {
    server_->Get("/status",
                 [this](const httplib::Request&, httplib::Response& res) {
                   res.set_content(status_(), "application/json");
                 });
  }
  int bound = -1;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (server_->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    *error = "cannot bind " + host + ":" + std::to_string(port);
    server_.reset();
    return -1;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() does nothing until the listening loop has begun (its
  // first statement marks it running), so Stop must not come before that.
  while (!server_->is_running()) std::this_thread::yield();
  return bound;
}

void HttpServer::Stop() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace metrics
}  // namespace ps
