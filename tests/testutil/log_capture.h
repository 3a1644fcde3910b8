// LogCapture: collects the glog lines logged while it exists, so a test can
// check that a wait or a drop was reported, and how.
#ifndef PS_TESTUTIL_LOG_CAPTURE_H_
#define PS_TESTUTIL_LOG_CAPTURE_H_

#include <glog/logging.h>

#include <mutex>
#include <string>
#include <vector>

namespace ps {

class LogCapture : public google::LogSink {
 public:
  LogCapture() { google::AddLogSink(this); }
  ~LogCapture() override { google::RemoveLogSink(this); }

  void send(google::LogSeverity /*severity*/, const char* /*full_filename*/,
            const char* /*base_filename*/, int /*line*/,
            const google::LogMessageTime& /*time*/, const char* message,
            size_t message_len) override {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.emplace_back(message, message_len);
  }

  // Lines that contain `text`.
  std::vector<std::string> Find(const std::string& text) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> found;
    for (const std::string& l : lines_) {
      if (l.find(text) != std::string::npos) found.push_back(l);
    }
    return found;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

}  // namespace ps

#endif  // PS_TESTUTIL_LOG_CAPTURE_H_
