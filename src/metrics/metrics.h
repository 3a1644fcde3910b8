// Metrics: counters, histograms and scrape-time collectors of one node, and
// their rendering in Prometheus' text exposition format (version 0.0.4).
//
// The data path only touches Counter and Histogram: one relaxed atomic add
// per event (a histogram: two, plus a bucket search over a few constants),
// no lock and no allocation. Everything else (membership, queue depths,
// table sizes, memory) is read when a scrape asks, by collectors that the
// owning component registers and removes.
//
// Layer: util-level; includes nothing of Ember's. Thread-safe.
#ifndef PS_METRICS_METRICS_H_
#define PS_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ps {
namespace metrics {

class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// Durations, observed in microseconds and exposed in seconds, in fixed
// buckets from 50 us to 10 s.
class Histogram {
 public:
  static constexpr std::array<int64_t, 17> kBoundsUs = {
      50,    100,    250,    500,    1000,    2500,    5000,    10000,   25000,
      50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};

  void ObserveUs(int64_t us);

  // Cumulative counts per bound (then +Inf), the count and the sum (in
  // seconds), as Prometheus wants them. The parts are read one at a time,
  // so a scrape during observations may see a bucket a little ahead of the
  // count; never behind by more than the observations in flight.
  struct Snapshot {
    std::array<uint64_t, kBoundsUs.size() + 1> cumulative{};
    uint64_t count = 0;
    double sum_seconds = 0;
  };
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBoundsUs.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_us_{0};
};

// One sample of a scrape. `labels` is the inside of the braces
// ("peer=\"9\",table=\"emb\""), already escaped (see Label), or "".
struct Sample {
  std::string name;
  std::string labels;
  double value = 0;
};

// What collectors write into during a scrape.
class Writer {
 public:
  void Counter(const std::string& name, const std::string& help,
               const std::string& labels, double value) {
    Add(name, help, "counter", labels, value);
  }
  void Gauge(const std::string& name, const std::string& help,
             const std::string& labels, double value) {
    Add(name, help, "gauge", labels, value);
  }
  void Histogram(const std::string& name, const std::string& help,
                 const std::string& labels, const Histogram::Snapshot& s);

  // The samples so far, in the order written, families together.
  std::vector<Sample> Samples() const;
  // The text format; `const_labels` (escaped, may be "") go first on every
  // sample.
  std::string Text(const std::string& const_labels) const;

 private:
  struct Family {
    std::string help;
    std::string type;
    std::vector<Sample> samples;
  };
  void Add(const std::string& name, const std::string& help,
           const std::string& type, const std::string& labels, double value,
           const std::string& family_name = "");
  std::map<std::string, size_t> index_;  // family name -> families_ index
  std::vector<std::pair<std::string, Family>> families_;
};

// `key="value"` with the value escaped for the text format.
std::string Label(const std::string& key, const std::string& value);

class Registry {
 public:
  using Collector = std::function<void(Writer*)>;

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The counter or histogram of `name` and `labels`, created at the first
  // call; the pointer stays valid for the registry's lifetime. Not for the
  // data path: call once and keep the pointer.
  metrics::Counter* GetCounter(const std::string& name, const std::string& help,
                               const std::string& labels = "");
  metrics::Histogram* GetHistogram(const std::string& name,
                                   const std::string& help,
                                   const std::string& labels = "");

  // Registers a collector, run on the scraping thread at every scrape; the
  // id removes it. Once RemoveCollector has returned, the collector is not
  // running and never runs again, so its owner may then be destroyed. A
  // collector must not call into the registry.
  int AddCollector(Collector collector);
  void RemoveCollector(int id);

  // Sets what identifies this process on every sample (node, role, rank):
  // called at each scrape, so it may change as the node joins.
  void set_const_labels(std::function<std::string()> labels);

  // Runs every collector and renders the text format.
  std::string Text() const;
  // Runs every collector; the samples, without the constant labels.
  std::vector<Sample> Collect() const;
  // The sum of every sample of `name` in `samples`.
  static double Sum(const std::vector<Sample>& samples,
                    const std::string& name);

 private:
  void CollectLocked(Writer* w) const;

  mutable std::mutex mu_;
  struct Owned {
    std::string name, help, labels;
    std::unique_ptr<metrics::Counter> counter;
    std::unique_ptr<metrics::Histogram> histogram;
  };
  // The metric of `name` and `labels` in `slot` (a counter or a
  // histogram), made on first use.
  template <typename T>
  T* GetOwned(std::unique_ptr<T> Owned::*slot, const std::string& name,
              const std::string& help, const std::string& labels);
  std::deque<Owned> owned_;                    // Guarded by mu_.
  std::map<int, Collector> collectors_;        // Guarded by mu_.
  int next_id_ = 1;                            // Guarded by mu_.
  std::function<std::string()> const_labels_;  // Guarded by mu_.
};

// This process's resident memory in bytes (from /proc/self/statm), or -1.
int64_t ResidentBytes();

}  // namespace metrics
}  // namespace ps

#endif  // PS_METRICS_METRICS_H_
