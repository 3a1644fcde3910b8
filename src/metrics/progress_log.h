// ProgressLog: a thread that logs one line of a node's progress every
// interval (EMBER_STATS_INTERVAL): requests, keys and bytes so far and their
// rates since the previous line, read from the node's Registry.
//
// Start/Stop lifecycle; Stop is idempotent and the destructor calls it.
#ifndef PS_METRICS_PROGRESS_LOG_H_
#define PS_METRICS_PROGRESS_LOG_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "metrics/metrics.h"

namespace ps {
namespace metrics {

class ProgressLog {
 public:
  // Totals at one moment, and the line that compares two of them.
  struct Totals {
    double requests = 0, keys = 0, bytes_sent = 0, bytes_received = 0;
    double messages_sent = 0, messages_received = 0;
    static Totals From(const std::vector<Sample>& samples);
  };
  static std::string Line(const std::string& who, const Totals& now,
                          const Totals& before, double seconds);

  // `registry` is borrowed and must outlive this. `who` names the node in
  // each line; it is called at every line (the rank comes with the join).
  ProgressLog(const Registry* registry, std::function<std::string()> who);
  ~ProgressLog();
  ProgressLog(const ProgressLog&) = delete;
  ProgressLog& operator=(const ProgressLog&) = delete;

  void Start(int interval_seconds);
  void Stop();

 private:
  void Loop(int interval_seconds);

  const Registry* const registry_;
  const std::function<std::string()> who_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // Guarded by mu_.
};

}  // namespace metrics
}  // namespace ps

#endif  // PS_METRICS_PROGRESS_LOG_H_
