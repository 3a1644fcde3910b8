#include "metrics/progress_log.h"

#include <glog/logging.h>

#include <chrono>
#include <cstdio>

namespace ps {
namespace metrics {

ProgressLog::Totals ProgressLog::Totals::From(
    const std::vector<Sample>& samples) {
  Totals t;
  t.requests = Registry::Sum(samples, "ember_requests_total");
  t.keys = Registry::Sum(samples, "ember_request_keys_total");
  t.bytes_sent = Registry::Sum(samples, "ember_bytes_sent_total");
  t.bytes_received = Registry::Sum(samples, "ember_bytes_received_total");
  t.messages_sent = Registry::Sum(samples, "ember_messages_sent_total");
  t.messages_received = Registry::Sum(samples, "ember_messages_received_total");
  return t;
}

std::string ProgressLog::Line(const std::string& who, const Totals& now,
                              const Totals& before, double seconds) {
  if (seconds <= 0) seconds = 1e-9;
  auto rate = [&](double a, double b) { return (a - b) / seconds; };
  char buf[512];
  snprintf(buf, sizeof(buf),
           "progress %s: %.0f requests (%.1f/s), %.0f keys (%.1f/s), "
           "sent %.0f messages %.3f MB (%.3f MB/s), received %.0f messages "
           "%.3f MB (%.3f MB/s) over the last %.1f s",
           who.c_str(), now.requests, rate(now.requests, before.requests),
           now.keys, rate(now.keys, before.keys), now.messages_sent,
           now.bytes_sent / 1e6, rate(now.bytes_sent, before.bytes_sent) / 1e6,
           now.messages_received, now.bytes_received / 1e6,
           rate(now.bytes_received, before.bytes_received) / 1e6, seconds);
  return buf;
}

ProgressLog::ProgressLog(const Registry* registry,
                         std::function<std::string()> who)
    : registry_(registry), who_(std::move(who)) {}

ProgressLog::~ProgressLog() { Stop(); }

void ProgressLog::Start(int interval_seconds) {
  if (interval_seconds <= 0 || thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this, interval_seconds] { Loop(interval_seconds); });
}

void ProgressLog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressLog::Loop(int interval_seconds) {
  using SteadyClock = std::chrono::steady_clock;
  Totals before = Totals::From(registry_->Collect());
  SteadyClock::time_point last = SteadyClock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (cv_.wait_until(lock, last + std::chrono::seconds(interval_seconds),
                       [this] { return stop_; })) {
      break;
    }
    lock.unlock();
    Totals now = Totals::From(registry_->Collect());
    SteadyClock::time_point t = SteadyClock::now();
    LOG(INFO) << Line(who_(), now, before,
                      std::chrono::duration<double>(t - last).count());
    before = now;
    last = t;
    lock.lock();
  }
}

}  // namespace metrics
}  // namespace ps
