#include "metrics/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ps {
namespace metrics {

constexpr std::array<int64_t, 17> Histogram::kBoundsUs;

void Histogram::ObserveUs(int64_t us) {
  if (us < 0) us = 0;
  size_t i = std::lower_bound(kBoundsUs.begin(), kBoundsUs.end(), us) -
             kBoundsUs.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(us), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  // The count first: buckets read later are never behind it.
  s.count = count_.load(std::memory_order_relaxed);
  s.sum_seconds = sum_us_.load(std::memory_order_relaxed) / 1e6;
  uint64_t total = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  // +Inf must equal the count (promtool checks it).
  s.count = std::max(s.count, total);
  s.cumulative.back() = s.count;
  return s;
}

std::string Label(const std::string& key, const std::string& value) {
  std::string out = key + "=\"";
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void Writer::Add(const std::string& name, const std::string& help,
                 const std::string& type, const std::string& labels,
                 double value, const std::string& family_name) {
  const std::string& family = family_name.empty() ? name : family_name;
  auto it = index_.find(family);
  if (it == index_.end()) {
    it = index_.emplace(family, families_.size()).first;
    families_.push_back({family, Family{help, type, {}}});
  }
  families_[it->second].second.samples.push_back({name, labels, value});
}

void Writer::Histogram(const std::string& name, const std::string& help,
                       const std::string& labels,
                       const Histogram::Snapshot& s) {
  const std::string sep = labels.empty() ? "" : labels + ",";
  for (size_t i = 0; i < Histogram::kBoundsUs.size(); ++i) {
    char le[32];
    snprintf(le, sizeof(le), "%g", Histogram::kBoundsUs[i] / 1e6);
    Add(name + "_bucket", help, "histogram", sep + Label("le", le),
        static_cast<double>(s.cumulative[i]), name);
  }
  Add(name + "_bucket", help, "histogram", sep + Label("le", "+Inf"),
      static_cast<double>(s.cumulative.back()), name);
  Add(name + "_sum", help, "histogram", labels, s.sum_seconds, name);
  Add(name + "_count", help, "histogram", labels, static_cast<double>(s.count),
      name);
}

std::vector<Sample> Writer::Samples() const {
  std::vector<Sample> out;
  for (const auto& f : families_) {
    out.insert(out.end(), f.second.samples.begin(), f.second.samples.end());
  }
  return out;
}

namespace {

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    snprintf(buf, sizeof(buf), "%.9g", v);
  }
  return buf;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string Writer::Text(const std::string& const_labels) const {
  std::string out;
  for (const auto& f : families_) {
    out += "# HELP " + f.first + " " + EscapeHelp(f.second.help) + "\n";
    out += "# TYPE " + f.first + " " + f.second.type + "\n";
    for (const Sample& s : f.second.samples) {
      std::string labels = const_labels;
      if (!s.labels.empty()) {
        labels += (labels.empty() ? "" : ",") + s.labels;
      }
      out += s.name;
      if (!labels.empty()) out += "{" + labels + "}";
      out += " " + FormatValue(s.value) + "\n";
    }
  }
  return out;
}

template <typename T>
T* Registry::GetOwned(std::unique_ptr<T> Owned::*slot, const std::string& name,
                      const std::string& help, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Owned& o : owned_) {
    if (o.*slot && o.name == name && o.labels == labels) {
      return (o.*slot).get();
    }
  }
  Owned o{name, help, labels, nullptr, nullptr};
  o.*slot = std::make_unique<T>();
  owned_.push_back(std::move(o));
  return (owned_.back().*slot).get();
}

metrics::Counter* Registry::GetCounter(const std::string& name,
                                       const std::string& help,
                                       const std::string& labels) {
  return GetOwned(&Owned::counter, name, help, labels);
}

metrics::Histogram* Registry::GetHistogram(const std::string& name,
                                           const std::string& help,
                                           const std::string& labels) {
  return GetOwned(&Owned::histogram, name, help, labels);
}

int Registry::AddCollector(Collector collector) {
  std::lock_guard<std::mutex> lock(mu_);
  int id = next_id_++;
  collectors_[id] = std::move(collector);
  return id;
}

void Registry::RemoveCollector(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.erase(id);
}

void Registry::set_const_labels(std::function<std::string()> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  const_labels_ = std::move(labels);
}

void Registry::CollectLocked(Writer* w) const {
  for (const Owned& o : owned_) {
    if (o.counter) {
      w->Counter(o.name, o.help, o.labels,
                 static_cast<double>(o.counter->value()));
    } else {
      w->Histogram(o.name, o.help, o.labels, o.histogram->Read());
    }
  }
  for (const auto& c : collectors_) c.second(w);
  w->Gauge("ember_resident_memory_bytes",
           "Resident memory of this process (/proc/self/statm)", "",
           static_cast<double>(ResidentBytes()));
}

std::string Registry::Text() const {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  CollectLocked(&w);
  return w.Text(const_labels_ ? const_labels_() : "");
}

std::vector<Sample> Registry::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w;
  CollectLocked(&w);
  return w.Samples();
}

double Registry::Sum(const std::vector<Sample>& samples,
                     const std::string& name) {
  double sum = 0;
  for (const Sample& s : samples) {
    if (s.name == name) sum += s.value;
  }
  return sum;
}

int64_t ResidentBytes() {
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  // "size resident shared ...", in pages.
  char* end = nullptr;
  strtoll(buf, &end, 10);
  if (end == buf) return -1;
  char* start = end;
  long long pages = strtoll(start, &end, 10);
  if (end == start || pages < 0) return -1;
  return static_cast<int64_t>(pages) * sysconf(_SC_PAGESIZE);
}

}  // namespace metrics
}  // namespace ps
